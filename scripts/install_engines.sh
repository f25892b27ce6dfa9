#!/usr/bin/env bash
# Make a current engine available beside the system's: when the system's docker.io is older than 25 (Debian 12 ships
# 20.10), fetch Debian 13's docker.io and containerd .debs with a private apt state and unpack them with dpkg -x into
# kvbake's cache. The machine's own apt sources and packages are never changed; the Debian mirror is the one they
# name (scripts/debian_mirror.py; KVBAKE_DEBIAN_MIRROR overrides it). Debian 12's runc is used (Debian 13's needs a
# newer glibc). Idempotent.
set -euo pipefail

VERSION=26.1.5
CACHE="${KVBAKE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvbake}"
TARGET="$CACHE/engines/docker-$VERSION"
SUITE=trixie

system_major=$( (dockerd --version 2>/dev/null || true) | sed -n 's/^Docker version \([0-9]*\)\..*/\1/p')
if [ -n "$system_major" ] && [ "$system_major" -ge 25 ]; then
  echo "engines: the system's Docker $system_major is current; no private engine needed"
  exit 0
fi
if [ -x "$TARGET/root/usr/sbin/dockerd" ] && "$TARGET/root/usr/sbin/dockerd" --version | grep -q "version $VERSION"; then
  echo "engines: Docker $VERSION already unpacked in $TARGET"
  exit 0
fi

echo "engines: fetching Debian 13's docker.io $VERSION and containerd into $TARGET"
bash "$(dirname "$0")/fetch_debs.sh" "$SUITE" "$TARGET.fetched" docker.io containerd
"$TARGET.fetched/root/usr/sbin/dockerd" --version | grep -q "version $VERSION" || {
  echo "engines: the fetched docker.io is not $VERSION: $("$TARGET.fetched/root/usr/sbin/dockerd" --version)" >&2; exit 1; }
command -v runc >/dev/null || PATH="/usr/sbin:$PATH" command -v runc >/dev/null || {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc >/dev/null; }
rm -rf "$TARGET/root" "$TARGET/debs"
mkdir -p "$TARGET"
mv "$TARGET.fetched/root" "$TARGET/root"
mv "$TARGET.fetched/debs" "$TARGET/debs"
rm -rf "$TARGET.fetched" "$TARGET.fetched.apt-$SUITE"
echo "engines: $("$TARGET/root/usr/sbin/dockerd" --version) unpacked in $TARGET"
