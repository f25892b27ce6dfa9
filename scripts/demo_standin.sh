#!/usr/bin/env bash
# The demo's bake half, on a copy of examples/standin (under .kvbake/demo/, ignored by git; KVBAKE_DEMO_DIR moves it),
# so the checkout stays as it was: the stand-in base (cached), lock, the runtime configs, build, deep verify, a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${KVBAKE_DEMO_DIR:-.kvbake/demo}/standin"
MANIFEST="$WORK/manifest.yaml"
echo "== stand-in base (Debian bookworm + Python 3.11 + vLLM 0.33.0 sources; built locally, never pulled)"
.venv/bin/python scripts/standin_base.py
echo "== a fresh copy of examples/standin in $WORK (the demo never changes the checkout)"
rm -rf "$WORK"
mkdir -p "$(dirname "$WORK")"
cp -R examples/standin "$WORK"
rm -rf "$WORK/.kvbake"
echo "== lock (re-pins this machine's own stand-in base on purpose; the chain, files and overlay must come out unchanged)"
.venv/bin/python build.py lock --manifest "$MANIFEST" --rebase-base
diff -r examples/standin/overlay "$WORK/overlay" >/dev/null || { echo "overlay/ changed: the chain no longer reproduces the shipped files" >&2; exit 7; }
.venv/bin/python - examples/standin/manifest.lock.json "$WORK/manifest.lock.json" <<'PY' || exit 7
import json, sys
shipped, relocked = (json.load(open(path)) for path in sys.argv[1:])
if shipped["patches"] != relocked["patches"]:
    sys.exit("the chain's pins changed: the patches no longer reproduce the shipped lock's hashes")
PY
echo "== runtime configs for both ranks (regenerated: they name the lock's hash)"
.venv/bin/python build.py config --all --manifest "$MANIFEST"
.venv/bin/python build.py config --check --all --manifest "$MANIFEST"
echo "== build"
.venv/bin/python build.py build --manifest "$MANIFEST"
echo "== verify --deep"
.venv/bin/python build.py verify --deep --manifest "$MANIFEST"
echo "== summary"
.venv/bin/python build.py plan --manifest "$MANIFEST" --json > "$WORK/.kvbake-demo-plan.json"
.venv/bin/python - "$WORK/.kvbake-demo-plan.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
print(f"stand-in image {plan['reference']}")
print(f"  config digest {plan['image_id']} (reproducible: same inputs, same config digest on every engine profile)")
print(f"  {len(plan['chain'])} patches, {len(plan['files'])} files, {len(plan['whiteouts'])} stale .pyc removed, switches in Env: none")
PY
rm -f "$WORK/.kvbake-demo-plan.json"
