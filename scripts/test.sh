#!/usr/bin/env bash
# Set up everything, build the stand-in base (cached), and run the whole test suite against real engines.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python scripts/standin_base.py
export KVBAKE_REQUIRE_DOCKER=1
exec .venv/bin/python -m pytest "$@"
