#!/usr/bin/env bash
# The signing tool kvbake drives: cosign, as Debian 13 packages it (a static binary that runs on Debian 12 too),
# fetched with a private apt state (scripts/fetch_debs.sh) and unpacked into kvbake's cache; the machine's own apt
# sources and packages are never changed. Prints nothing new when it is already there. Idempotent.
set -euo pipefail

COSIGN_VERSION=2.5.0
CACHE="${KVBAKE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvbake}"
TARGET="$CACHE/tools/cosign-$COSIGN_VERSION"
binary="$TARGET/root/usr/bin/cosign"

# Debian's build reports "devel" as its version: the package's own version, kept beside it, says which it is.
packaged() { for deb in "$1"/debs/cosign_*.deb; do [ -f "$deb" ] && dpkg-deb -f "$deb" Version; done; }
if [ -x "$binary" ] && packaged "$TARGET" | grep -q "^$COSIGN_VERSION-"; then
  echo "tools: cosign $COSIGN_VERSION already unpacked in $TARGET"
  exit 0
fi
echo "tools: fetching Debian 13's cosign $COSIGN_VERSION into $TARGET"
bash "$(dirname "$0")/fetch_debs.sh" trixie "$TARGET.fetched" cosign
packaged "$TARGET.fetched" | grep -q "^$COSIGN_VERSION-" || {
  echo "tools: the fetched cosign is not $COSIGN_VERSION: $(packaged "$TARGET.fetched")" >&2; exit 1; }
"$TARGET.fetched/root/usr/bin/cosign" version >/dev/null 2>&1 || { echo "tools: the fetched cosign does not run here" >&2; exit 1; }
rm -rf "$TARGET/root" "$TARGET/debs"
mkdir -p "$TARGET"
mv "$TARGET.fetched/root" "$TARGET/root"
mv "$TARGET.fetched/debs" "$TARGET/debs"
rm -rf "$TARGET.fetched" "$TARGET.fetched.apt-trixie"
echo "tools: cosign $COSIGN_VERSION unpacked in $TARGET"
