#!/usr/bin/env bash
# Installs what test/node/image.test.ts and the quick start's `docker build`
# need, with apt-get, when missing (idempotent; needs root, as the real node):
#
#   podman, podman-docker   `docker build` / `docker push` as the README writes them
#   buildah                 the two-architecture build (`--platform ... --manifest`)
#   skopeo                  pushes the base images' stand-ins, inspects what was pushed
#   docker-registry         the local registry (Distribution 2.8)
#
# and adds arm64 as a foreign dpkg architecture, for the arm64 .debs of the
# runtime stage's stand-in (`apt-get download libc6:arm64 ...`; nothing is
# installed for arm64). The stand-ins themselves are built by
# test/harness/image/standins.ts into ${JOBHARVEST_CACHE:-$HOME/.cache/jobharvest}/image/.
set -euo pipefail

fail() {
  echo "image:tools: $*" >&2
  exit 1
}

packages=(podman podman-docker buildah skopeo docker-registry)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
need_arm64=0
dpkg --print-foreign-architectures | grep -qx arm64 || need_arm64=1

if ((${#missing[@]} == 0 && need_arm64 == 0)); then
  echo "image:tools: up to date"
  exit 0
fi
[[ "$(id -u)" == 0 ]] || fail "missing ${missing[*]:-} (arm64 dpkg architecture missing: $need_arm64), and only root can add them (building images needs root anyway)"
command -v apt-get >/dev/null 2>&1 || fail "no apt-get to install ${missing[*]} (Debian bookworm's are expected)"
export DEBIAN_FRONTEND=noninteractive
if ((need_arm64)); then
  echo "image:tools: adding the arm64 dpkg architecture"
  dpkg --add-architecture arm64
  apt-get update >/dev/null
fi
if ((${#missing[@]} > 0)); then
  echo "image:tools: installing ${missing[*]} with apt-get"
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; } ||
    fail "apt-get could not install ${missing[*]}"
fi
# podman-docker's `docker` says on every call that it is podman.
mkdir -p /etc/containers && touch /etc/containers/nodocker
echo "image:tools: done"
