#!/usr/bin/env bash
# Set up everything, build the stand-in bases (cached), and run the tests against real engines: the whole suite on the
# machine's default engine, then every docker test (all but those marked default_engine_only) on every other engine profile this machine has (Debian 12: Docker 20.10 by default, plus Docker 26.1 classic and containerd store; Debian 13:
# Docker 26.1 classic by default, plus the containerd store). KVBAKE_PROFILES=default runs the default engine only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python scripts/standin_base.py
.venv/bin/python scripts/standin_base_arm64.py
.venv/bin/python scripts/standin_vllm_base.py
export KVBAKE_REQUIRE_DOCKER=1
default=$(.venv/bin/python -c 'from kvbake.engines.adapters.client import Engine; print(Engine().profile().name)')
echo "test: the whole suite on the default engine, profile $default"
.venv/bin/python -m pytest --durations=25 "$@"
if [ "${KVBAKE_PROFILES:-all}" = default ]; then
  exit 0
fi
for profile in $(.venv/bin/python scripts/engines.py --others); do
  echo "test: the integration suite on engine profile $profile"
  status=0
  KVBAKE_TEST_PROFILE=$profile .venv/bin/python -m pytest -m "docker and not default_engine_only" --durations=15 "$@" || status=$?
  # Exit code 5 means the selection had no docker test (for example `test.sh tests/unit`); anything else counts.
  if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
    exit "$status"
  fi
done
