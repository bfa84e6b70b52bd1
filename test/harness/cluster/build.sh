#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager and helm from the pinned
# Go modules in this folder, then links them into test/harness/cluster/bin/.
#
# A Kubernetes build takes many minutes on two cores, so the binaries live in
# ${JOBHARVEST_CACHE:-$HOME/.cache/jobharvest}/cluster/<key>/ where <key> hashes
# everything that decides their content (module files, this script, the Go
# version). A fresh clone on a machine that built them before reuses them; a
# changed pin builds into a new key and never overwrites binaries in use.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${JOBHARVEST_CACHE:-$HOME/.cache/jobharvest}/cluster"
bin_link_dir="$here/bin"

if ! command -v go >/dev/null 2>&1; then
  echo "cluster:build: the Go toolchain is required (go.mod asks for $(sed -n 's/^go //p' "$here/go.mod") or newer)" >&2
  exit 1
fi

# The version a module is selected at in the module in folder $2.
selected_version() {
  (cd "$2" && go list -mod=readonly -m -f '{{.Version}}' "$1")
}

k8s_version="$(selected_version k8s.io/kubernetes "$here")"
etcd_version="$(selected_version go.etcd.io/etcd/server/v3 "$here")"
helm_version="$(selected_version helm.sh/helm/v4 "$here/helm")"
go_version="$(go env GOVERSION)"
if [[ -z "$k8s_version" || -z "$etcd_version" || -z "$helm_version" ]]; then
  echo "cluster:build: could not read the pinned versions from go.mod" >&2
  exit 1
fi

key="$(
  {
    echo "$go_version $(go env GOOS)/$(go env GOARCH)"
    cat "$here/go.mod" "$here/go.sum" "$here/helm/go.mod" "$here/helm/go.sum" "$here/build.sh"
  } | sha256sum | cut -c1-16
)"
out="$cache_root/$key"

link_bins() {
  # Marks the entry as in use, for the pruning below.
  touch "$out/.complete"
  # Entries of older pins that no checkout has linked for two weeks; a pin in
  # use elsewhere keeps being touched and stays.
  for old in "$cache_root"/*/; do
    old="${old%/}"
    if [[ "$old" != "$out" && -n "$(find "$old/.complete" -mtime +14 2>/dev/null)" ]]; then
      rm -rf "$old"
    fi
  done
  mkdir -p "$bin_link_dir"
  for name in etcd kube-apiserver kube-controller-manager helm versions.json; do
    ln -sfn "$out/$name" "$bin_link_dir/$name"
  done
}

if [[ -f "$out/.complete" ]]; then
  link_bins
  echo "cluster:build: up to date ($out)"
  exit 0
fi

mkdir -p "$cache_root"
# Two checkouts (or a developer and CI) building at once would each spend many
# minutes on the same result; the second waits and then finds it complete.
exec 9>"$cache_root/.lock"
flock 9
if [[ -f "$out/.complete" ]]; then
  link_bins
  echo "cluster:build: up to date ($out)"
  exit 0
fi

started=$SECONDS
staging="$(mktemp -d "$cache_root/.build-$key.XXXXXX")"
chmod 755 "$staging"
trap 'rm -rf "$staging"' EXIT

k8s_minor="${k8s_version#v1.}"
k8s_minor="${k8s_minor%%.*}"
# Without these stamps /version reports v0.0.0-master and clients that gate on
# the server version (the webhook's e2e tests among them) see a bogus release.
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor -X $pkg.gitTreeState=clean"
done

echo "cluster:build: building Kubernetes $k8s_version and etcd $etcd_version with $go_version (this takes a while on a cold cache)"
(
  cd "$here"
  go build -mod=readonly -trimpath -ldflags "$k8s_ldflags" -o "$staging/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    go.etcd.io/etcd/server/v3
)
# etcd's main package is the module root, so go names the binary after "server".
mv "$staging/server" "$staging/etcd"

echo "cluster:build: building Helm $helm_version"
(
  cd "$here/helm"
  go build -mod=readonly -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
    -o "$staging/helm" helm.sh/helm/v4/cmd/helm
)

cat >"$staging/versions.json" <<EOF
{"kubernetes":"$k8s_version","etcd":"$etcd_version","helm":"$helm_version","go":"$go_version"}
EOF
touch "$staging/.complete"
rm -rf "$out"
mv "$staging" "$out"
trap - EXIT
link_bins
echo "cluster:build: built in $((SECONDS - started))s into $out ($(du -sh "$out" | cut -f1))"
