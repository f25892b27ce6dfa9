#!/usr/bin/env bash
# Set up everything kvbake needs on a fresh Debian/Ubuntu machine (as root): packages, a Docker engine, the venv.
# Idempotent: installed packages, a running engine and an existing venv are reused.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(docker.io runc docker-registry docker-compose debootstrap git openssh-server openssh-client apache2-utils openssl python3-venv ca-certificates debian-archive-keyring skopeo)

need_install=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_install+=("$pkg")
done
if [ ${#need_install[@]} -gt 0 ]; then
  echo "setup: installing ${need_install[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_install[@]}" >/dev/null
fi

# A Docker engine with no bridge and no iptables rules: containers use --network host or none.
if ! docker info >/dev/null 2>&1; then
  echo "setup: starting dockerd --bridge=none --iptables=false"
  mkdir -p /var/log/kvbake
  nohup dockerd --bridge=none --iptables=false >/var/log/kvbake/dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "setup: dockerd did not start; see /var/log/kvbake/dockerd.log" >&2; exit 1; }
fi

# The engines of every profile the tests use: Docker 26.1.5 beside Debian 12's 20.10 (unpacked privately).
bash scripts/install_engines.sh
# The signing tool: cosign 2.5 from Debian 13 and cosign 3 from unstable (unpacked privately; static binaries).
bash scripts/install_tools.sh

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r requirements.lock  # runtime and test pins
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
echo "setup: ready (docker $(docker version --format '{{.Server.Version}}'), $(.venv/bin/python --version))"
.venv/bin/python scripts/engines.py | sed "s/^/setup: /"
