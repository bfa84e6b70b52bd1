#!/usr/bin/env bash
# Builds the real node of the node tests and links it into test/harness/node/bin/:
#
#   kubelet, kube-proxy, kubectl, kube-scheduler   ./kube (the control plane's k8s.io/kubernetes pin)
#   containerd, containerd-shim-runc-v2, ctr       ./containerd (a module of their own)
#   pause                                          ./pause (static, CGO_ENABLED=0)
#   runc, cni/ (bridge, host-local, loopback)      Debian's runc and containernetworking-plugins,
#   (busybox, iptables)                            iptables and busybox-static, installed with apt-get
#                                                  when missing
#
# runc comes from Debian rather than a Go module: it needs cgo and libseccomp's
# headers to build, and Debian's 1.1.5 is the runc containerd 2.x was measured
# to run pods with on this machine kind.
#
# Like test/harness/cluster/build.sh, the Go binaries live in
# ${JOBHARVEST_CACHE:-$HOME/.cache/jobharvest}/node/<key>/, where <key> hashes
# the module files, the pause program, this script and the Go version.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${JOBHARVEST_CACHE:-$HOME/.cache/jobharvest}/node"
bin_link_dir="$here/bin"

fail() {
  echo "node:build: $*" >&2
  exit 1
}

command -v go >/dev/null 2>&1 ||
  fail "the Go toolchain is required (kube/go.mod asks for $(sed -n 's/^go //p' "$here/kube/go.mod") or newer)"

# The Debian packages the node runs with. Installing them needs root; so does
# every later step of the node (namespaces, mounts, cgroups), so a non-root
# user learns it here rather than from a half-started node.
debian_packages=(runc containernetworking-plugins iptables busybox-static)
missing=()
command -v runc >/dev/null 2>&1 || missing+=(runc)
[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
# The workload image's only program.
[[ -x /bin/busybox ]] && file -L /bin/busybox 2>/dev/null | grep -q static || missing+=(busybox-static)
if ((${#missing[@]} > 0)); then
  [[ "$(id -u)" == 0 ]] || fail "missing Debian packages ${missing[*]}, and only root can install them (the real node needs root anyway)"
  command -v apt-get >/dev/null 2>&1 || fail "missing ${missing[*]} and no apt-get to install them (the node expects Debian's ${debian_packages[*]})"
  echo "node:build: installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; } ||
    fail "apt-get could not install ${missing[*]}"
fi

selected_version() {
  (cd "$2" && go list -mod=readonly -m -f '{{.Version}}' "$1")
}

k8s_version="$(selected_version k8s.io/kubernetes "$here/kube")"
containerd_version="$(selected_version github.com/containerd/containerd/v2 "$here/containerd")"
go_version="$(go env GOVERSION)"
[[ -n "$k8s_version" && -n "$containerd_version" ]] || fail "could not read the pinned versions from the go.mod files"
runc_version="$(runc --version | sed -n 's/^runc version //p')"
cni_version="$(dpkg-query -W -f '${Version}' containernetworking-plugins 2>/dev/null || echo unknown)"

key="$(
  {
    echo "$go_version $(go env GOOS)/$(go env GOARCH)"
    cat "$here/kube/go.mod" "$here/kube/go.sum" "$here/containerd/go.mod" "$here/containerd/go.sum" \
      "$here/pause/go.mod" "$here/pause/main.go" "$here/build.sh"
  } | sha256sum | cut -c1-16
)"
out="$cache_root/$key"
go_binaries=(kubelet kube-proxy kubectl kube-scheduler containerd containerd-shim-runc-v2 ctr pause)

link_bins() {
  touch "$out/.complete"
  for old in "$cache_root"/*/; do
    old="${old%/}"
    if [[ "$old" != "$out" && -n "$(find "$old/.complete" -mtime +14 2>/dev/null)" ]]; then
      rm -rf "$old"
    fi
  done
  mkdir -p "$bin_link_dir"
  for name in "${go_binaries[@]}"; do
    ln -sfn "$out/$name" "$bin_link_dir/$name"
  done
  ln -sfn "$(command -v runc)" "$bin_link_dir/runc"
  ln -sfn /usr/lib/cni "$bin_link_dir/cni"
  cat >"$bin_link_dir/versions.json" <<EOF
{"kubernetes":"$k8s_version","containerd":"$containerd_version","runc":"$runc_version","cni":"$cni_version","go":"$go_version"}
EOF
}

if [[ -f "$out/.complete" ]]; then
  link_bins
  echo "node:build: up to date ($out)"
  exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [[ -f "$out/.complete" ]]; then
  link_bins
  echo "node:build: up to date ($out)"
  exit 0
fi

started=$SECONDS
staging="$(mktemp -d "$cache_root/.build-$key.XXXXXX")"
chmod 755 "$staging"
trap 'rm -rf "$staging"' EXIT

k8s_minor="${k8s_version#v1.}"
k8s_minor="${k8s_minor%%.*}"
# The same version stamps as the control plane's build: the kubelet reports
# them as the node's kubeletVersion, and kubectl's version skew check reads them.
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor -X $pkg.gitTreeState=clean"
done

echo "node:build: building kubelet, kube-proxy, kubectl and kube-scheduler $k8s_version with $go_version"
(
  cd "$here/kube"
  go build -mod=readonly -trimpath -ldflags "$k8s_ldflags" -o "$staging/" \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kube-scheduler
)

echo "node:build: building containerd $containerd_version"
# cgo stays on: containerd's overlay snapshotter and the shim's seccomp and
# cgroup handling are what a real node runs.
(
  cd "$here/containerd"
  go build -mod=readonly -trimpath \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version" \
    -o "$staging/" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr
)

echo "node:build: building pause"
(
  cd "$here/pause"
  CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$staging/pause" .
)

touch "$staging/.complete"
rm -rf "$out"
mv "$staging" "$out"
trap - EXIT
link_bins
echo "node:build: built in $((SECONDS - started))s into $out ($(du -sh "$out" | cut -f1))"
