#!/usr/bin/env bash
# Builds one Kubernetes minor of the version matrix (npm run test:versions):
# etcd, kube-apiserver, kube-controller-manager, kubelet, kube-proxy and
# kube-scheduler from the module in ./<minor>/ (e.g. ./1.32/).
#
#   build.sh <minor>   prints the folder that holds the binaries on its last line
#
# Like test/harness/cluster/build.sh, the binaries live in
# ${JOBHARVEST_CACHE:-$HOME/.cache/jobharvest}/versions/<key>/, where <key>
# hashes the module files, this script and the Go version; nothing is linked
# into the checkout, because the matrix runs several minors side by side. Helm,
# kubectl, containerd, runc and pause stay those of the default pins (the
# cluster and node builds): they are clients and the node's runtime, not the
# Kubernetes release under test.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${JOBHARVEST_CACHE:-$HOME/.cache/jobharvest}/versions"

fail() {
  echo "versions:build: $*" >&2
  exit 1
}

[[ $# == 1 && "$1" =~ ^1\.[0-9]+$ ]] || fail "usage: build.sh <minor>, e.g. build.sh 1.32"
minor="$1"
mod="$here/$minor"
[[ -f "$mod/go.mod" ]] || fail "no module for Kubernetes $minor in $mod"
command -v go >/dev/null 2>&1 || fail "the Go toolchain is required"

selected_version() {
  (cd "$mod" && go list -mod=readonly -m -f '{{.Version}}' "$1")
}

k8s_version="$(selected_version k8s.io/kubernetes)"
etcd_version="$(selected_version go.etcd.io/etcd/server/v3)"
go_version="$(go env GOVERSION)"
[[ -n "$k8s_version" && -n "$etcd_version" ]] || fail "could not read the pinned versions from $mod/go.mod"
[[ "$k8s_version" == "v$minor."* ]] || fail "$mod/go.mod pins Kubernetes $k8s_version, not a $minor release"

key="$(
  {
    echo "$go_version $(go env GOOS)/$(go env GOARCH)"
    cat "$mod/go.mod" "$mod/go.sum" "$here/build.sh"
  } | sha256sum | cut -c1-16
)"
out="$cache_root/$key"

finish() {
  # Marks the entry as in use; entries no run has used for two weeks go.
  touch "$out/.complete"
  for old in "$cache_root"/*/; do
    old="${old%/}"
    if [[ "$old" != "$out" && -n "$(find "$old/.complete" -mtime +14 2>/dev/null)" ]]; then
      rm -rf "$old"
    fi
  done
  echo "$out"
}

if [[ -f "$out/.complete" ]]; then
  echo "versions:build: Kubernetes $minor up to date" >&2
  finish
  exit 0
fi

mkdir -p "$cache_root"
# One build at a time: two would share two cores for twice as long.
exec 9>"$cache_root/.lock"
flock 9
if [[ -f "$out/.complete" ]]; then
  echo "versions:build: Kubernetes $minor up to date" >&2
  finish
  exit 0
fi

started=$SECONDS
staging="$(mktemp -d "$cache_root/.build-$key.XXXXXX")"
chmod 755 "$staging"
trap 'rm -rf "$staging"' EXIT

k8s_minor="${minor#1.}"
# The stamps of the release build: /version and the node's kubeletVersion
# report them, and the matrix checks them against the pin.
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor -X $pkg.gitTreeState=clean"
done

echo "versions:build: building Kubernetes $k8s_version and etcd $etcd_version with $go_version (many minutes on a cold cache)" >&2
(
  cd "$mod"
  go build -mod=readonly -trimpath -ldflags "$k8s_ldflags" -o "$staging/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kube-scheduler \
    go.etcd.io/etcd/server/v3
) >&2
# etcd's main package is the module root, so go names the binary after "server".
mv "$staging/server" "$staging/etcd"

seconds=$((SECONDS - started))
cat >"$staging/versions.json" <<EOF
{"kubernetes":"$k8s_version","etcd":"$etcd_version","go":"$go_version","buildSeconds":$seconds}
EOF
touch "$staging/.complete"
rm -rf "$out"
mv "$staging" "$out"
trap - EXIT
echo "versions:build: built Kubernetes $minor in ${seconds}s into $out ($(du -sh "$out" | cut -f1))" >&2
finish
