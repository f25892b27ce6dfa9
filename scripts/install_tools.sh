#!/usr/bin/env bash
# The signing tool kvbake drives: cosign, in the two generations Debian packages (a static binary that runs on Debian
# 12 too): 2.5 from Debian 13, kvbake's default, and 3.1 from Debian's unstable suite, whose default signature format
# differs (the tests sign and verify across both). Each is fetched with a private apt state (scripts/fetch_debs.sh) and
# unpacked into kvbake's cache; the machine's own apt sources and packages are never changed. Idempotent.
set -euo pipefail

CACHE="${KVBAKE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvbake}"

# Debian's build reports "devel" as its version: the package's own version, kept beside it, says which it is.
packaged() { for deb in "$1"/debs/cosign_*.deb; do [ -f "$deb" ] && dpkg-deb -f "$deb" Version; done; }

install_cosign() {  # VERSION SUITE PATTERN: the folder's version, the Debian suite, what the package's version must match
  local version="$1" suite="$2" pattern="$3"
  local target="$CACHE/tools/cosign-$version"
  if [ -x "$target/root/usr/bin/cosign" ] && packaged "$target" | grep -q "$pattern"; then
    echo "tools: cosign $version already unpacked in $target"
    return 0
  fi
  echo "tools: fetching Debian $suite's cosign $version into $target"
  bash "$(dirname "$0")/fetch_debs.sh" "$suite" "$target.fetched" cosign
  packaged "$target.fetched" | grep -q "$pattern" || {
    echo "tools: the fetched cosign is not $version: $(packaged "$target.fetched")" >&2; exit 1; }
  "$target.fetched/root/usr/bin/cosign" version >/dev/null 2>&1 || { echo "tools: the fetched cosign does not run here" >&2; exit 1; }
  rm -rf "$target/root" "$target/debs"
  mkdir -p "$target"
  mv "$target.fetched/root" "$target/root"
  mv "$target.fetched/debs" "$target/debs"
  rm -rf "$target.fetched" "$target.fetched.apt-$suite"
  echo "tools: cosign $version unpacked in $target"
}

install_cosign 2.5.0 trixie '^2\.5\.0-'
install_cosign 3 sid '^3\.'  # unstable moves: any cosign 3 (3.1.1 when this was written)
