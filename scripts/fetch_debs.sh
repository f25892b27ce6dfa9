#!/usr/bin/env bash
# Fetch Debian packages of one suite with a private apt state and unpack them (dpkg -x) into a folder, whole or not at
# all; the machine's own apt sources and packages are never changed. The mirror is the one the machine's apt sources
# name (scripts/debian_mirror.py; KVBAKE_DEBIAN_MIRROR overrides it).
#
#   bash scripts/fetch_debs.sh SUITE TARGET PACKAGE...   # TARGET/root holds the unpacked files, TARGET/debs the .debs
set -euo pipefail
suite=$1 target=$2
shift 2
mirror=$(python3 "$(dirname "$0")/debian_mirror.py")  # fails in one line naming KVBAKE_DEBIAN_MIRROR
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [ ! -f "$keyring" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debian-archive-keyring >/dev/null
fi
state="$target.apt-$suite"
rm -rf "$target.partial"
mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$target.partial/debs"
echo "deb [signed-by=$keyring] $mirror $suite main" > "$state/sources.list"
apt_private=(-o "Dir::Etc::SourceList=$state/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache" -o Debug::NoLocking=1
             -o APT::Sandbox::User=root)
apt-get "${apt_private[@]}" update -qq
(cd "$target.partial/debs" && apt-get "${apt_private[@]}" download -qq "$@")
for deb in "$target.partial/debs"/*.deb; do
  dpkg -x "$deb" "$target.partial/root"
done
rm -rf "$target/root" "$target/debs"
mkdir -p "$target"
mv "$target.partial/root" "$target/root"
mv "$target.partial/debs" "$target/debs"
rm -rf "$target.partial"
