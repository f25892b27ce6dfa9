#!/usr/bin/env bash
# Run the CI entry point (.ci/run: set-up and the whole test matrix) inside a Debian 13 (trixie) chroot, on a Debian 12
# machine: Debian 13's own docker.io 26.1.5, containerd and docker-cli, its apt, its debootstrap. The chroot shares
# the kernel, loopback and the disk; it gets its own /run, /etc and Docker data root. Needs root and debootstrap.
#
#   bash scripts/debian13_chroot.sh            # create (once) and run; the log goes to stdout
#   KVBAKE_CHROOT=/srv/other bash scripts/debian13_chroot.sh
#
# The chroot is a bind mount of itself (dockerd remounts / while it unpacks layers). It receives this machine's CA
# certificates and pip configuration (a site proxy or a local wheel folder keeps working), and, when python3 is not
# Debian's (a pyenv build, say), that interpreter's folder, read-only. The commit under test is HEAD of this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="${KVBAKE_CHROOT:-/srv/kvbake-debian13}"
MIRROR="${KVBAKE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [ ! -f "$ROOT/etc/debian_version" ]; then
  echo "chroot: debootstrap trixie into $ROOT"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,git trixie "$ROOT" "$MIRROR" >/dev/null
fi

chroot_pids() {
  for proc in /proc/[0-9]*; do
    [ "$(readlink "$proc/root" 2>/dev/null)" = "$ROOT" ] && echo "${proc#/proc/}"
  done
  return 0
}

cleanup() {
  local pids
  pids=$(chroot_pids)
  [ -z "$pids" ] || kill $pids 2>/dev/null || true
  for _ in $(seq 1 30); do [ -z "$(chroot_pids)" ] && break; sleep 1; done
  grep " $ROOT" /proc/mounts | awk '{print $2}' | sort -r | while read -r point; do umount -l "$point" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup

mount --bind "$ROOT" "$ROOT" && mount --make-private "$ROOT"
mount -t proc proc "$ROOT/proc"
mount --rbind /sys "$ROOT/sys" && mount --make-rslave "$ROOT/sys"
mount --rbind /dev "$ROOT/dev" && mount --make-rslave "$ROOT/dev"
mount -t tmpfs tmpfs "$ROOT/run"

cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp -r /usr/local/share/ca-certificates/. "$ROOT/usr/local/share/ca-certificates/"
  chroot "$ROOT" update-ca-certificates >/dev/null
fi
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$ROOT/etc/pip.conf"
[ -d /etc/xdg/pip ] && mkdir -p "$ROOT/etc/xdg" && cp -r /etc/xdg/pip "$ROOT/etc/xdg/"
for folder in ${PIP_FIND_LINKS:-} /opt; do  # local wheel folders the pip configuration may name
  if [ -d "$folder" ]; then mkdir -p "$ROOT$folder" && mount --bind "$folder" "$ROOT$folder" && mount -o remount,bind,ro "$ROOT$folder"; fi
done

python_bin=$(dirname "$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')")
python_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
case "$python_bin" in
  /usr/bin) ;;
  *) prefix=$(dirname "$python_bin")
     mkdir -p "$ROOT$prefix" && mount --bind "$prefix" "$ROOT$prefix" && mount -o remount,bind,ro "$ROOT$prefix"
     python_path="$python_bin:$python_path" ;;
esac

rm -rf "$ROOT/root/kvbake"
git clone -q . "$ROOT/root/kvbake"
echo "chroot: Debian $(cat "$ROOT/etc/debian_version"), testing $(git rev-parse --short HEAD)"
chroot "$ROOT" /usr/bin/env -i HOME=/root TERM=dumb CI=true PATH="$python_path" \
  SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
  ${PIP_FIND_LINKS:+PIP_FIND_LINKS=$PIP_FIND_LINKS} \
  bash -c 'cd /root/kvbake && bash .ci/run'
