#!/usr/bin/env bash
# The operator's install: kvbake and its dependencies, pinned with hashes (requirements.lock), in a virtual
# environment. It never installs, starts or configures a container engine: `kvbake doctor` checks the one it finds.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-$HOME/.local/share/kvbake/venv}
python3 -m venv "$VENV"
RUNTIME=$(mktemp)
trap 'rm -f "$RUNTIME"' EXIT
sed '/^# --- test extra/,$d' requirements.lock > "$RUNTIME"  # operators need no test dependencies
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --require-hashes -r "$RUNTIME"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps .
echo "installed kvbake $("$VENV/bin/kvbake" --version | cut -d' ' -f2) and the reference launcher $VENV/bin/kvbake-launch-vllm in $VENV"
echo "next: $VENV/bin/kvbake doctor --registry HOST:PORT (your private registry); after kvbake init, run"
echo "      kvbake doctor --deploy deploy.yaml in the folder init --out wrote (docs/production.md)"
