#!/usr/bin/env bash
# Run the CI entry point (.ci/run: set-up and the whole test matrix) in a Debian 13 (trixie) root filesystem, on a
# Debian 12 machine: Debian 13's own docker.io 26.1.5, containerd, runc, docker-cli, apt and debootstrap. Needs root,
# debootstrap and util-linux's unshare.
#
#   bash scripts/debian13_chroot.sh            # create the root once, then run; the log goes to stdout
#   KVBAKE_CHROOT=/srv/other bash scripts/debian13_chroot.sh
#   bash scripts/debian13_chroot.sh tests/integration/test_serve_shapes.py   # scripts/test.sh with these pytest
#                                              # arguments (set-up, bases and every engine profile) instead of .ci/run
#
# The run gets its own mount and PID namespaces and pivots into the Debian 13 root, so `/` is a real mount point as on
# a Debian 13 machine (a plain chroot is not: dockerd cannot remount it, and containers then cannot pivot into their
# image). It shares the kernel, loopback and the disk; everything it starts ends with it. It receives this machine's CA
# certificates and pip configuration (a site proxy or a local wheel folder keeps working), and, when python3 is not
# Debian's (a pyenv build, say), that interpreter's folder, read-only. The commit under test is HEAD of this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="${KVBAKE_CHROOT:-/srv/kvbake-debian13}"

if [ ! -f "$ROOT/etc/debian_version" ]; then
  MIRROR=$(python3 scripts/debian_mirror.py)  # the machine's own apt sources name it; KVBAKE_DEBIAN_MIRROR overrides
  echo "debian13: debootstrap trixie into $ROOT from $MIRROR"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,git trixie "$ROOT" "$MIRROR" >/dev/null
fi

cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp -r /usr/local/share/ca-certificates/. "$ROOT/usr/local/share/ca-certificates/"
  chroot "$ROOT" update-ca-certificates >/dev/null
fi
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$ROOT/etc/pip.conf"
[ -d /etc/xdg/pip ] && mkdir -p "$ROOT/etc/xdg" && cp -r /etc/xdg/pip "$ROOT/etc/xdg/"

binds=()  # host folders the run sees read-only at the same path
for folder in ${PIP_FIND_LINKS:-} /opt; do [ -d "$folder" ] && binds+=("$folder"); done
python_bin=$(dirname "$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')")
run_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
if [ "$python_bin" != /usr/bin ]; then
  binds+=("$(dirname "$python_bin")")
  run_path="$python_bin:$run_path"
fi

rm -rf "$ROOT/root/kvbake"
git clone -q . "$ROOT/root/kvbake"
echo "debian13: Debian $(cat "$ROOT/etc/debian_version"), testing $(git rev-parse --short HEAD)"

tests=".ci/run"
if [ $# -gt 0 ]; then
  tests="scripts/test.sh -p no:cacheprovider$(printf ' %q' "$@")"
fi
unshare --mount --pid --fork --propagation private /bin/bash -s "$ROOT" "$run_path" "${PIP_FIND_LINKS:-}" "$tests" "${binds[@]}" <<'INSIDE'
set -euo pipefail
root=$1 run_path=$2 find_links=$3 tests=$4
shift 4
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"
mount -t tmpfs tmpfs "$root/run"
for folder in "$@"; do
  mkdir -p "$root$folder" && mount --bind "$folder" "$root$folder" && mount -o remount,bind,ro "$root$folder"
done
cd "$root"
mkdir -p .old-root
pivot_root . .old-root
cd /
umount -l /.old-root
exec /usr/bin/env -i HOME=/root TERM=dumb CI=true PATH="$run_path" SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  PIP_CERT=/etc/ssl/certs/ca-certificates.crt ${find_links:+PIP_FIND_LINKS=$find_links} \
  bash -c "cd /root/kvbake && bash $tests"
INSIDE
