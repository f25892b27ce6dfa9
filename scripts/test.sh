#!/usr/bin/env bash
# Set up everything, build the stand-in bases (cached), and run the tests against real engines: the suite on the
# machine's default engine and, at the same time, every docker test (all but those marked default_engine_only) on every
# other engine profile this machine has (Debian 12: Docker 20.10 by default, plus Docker 26.1 classic
# and containerd store; Debian 13: Docker 26.1 classic by default, plus the containerd store). A Docker 20.10 pass
# runs the unit tests, the default_engine_only tests and the main job's (every_engine); never field_engines_only.
# KVBAKE_PROFILES=default runs the default engine only (then 20.10 runs every docker test but field_engines_only).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/docs.sh --check  # the docs site: generated pages current, mkdocs build --strict passes (seconds)
.venv/bin/python scripts/standin_base.py
.venv/bin/python scripts/standin_ray_base.py  # ray on top of the stand-in base: the real-Ray serve shapes
.venv/bin/python scripts/standin_base.py --vllm-version 0.34.0  # the next release: rebase's target in the tests
.venv/bin/python scripts/standin_base_arm64.py
.venv/bin/python scripts/standin_vllm_base.py
export KVBAKE_REQUIRE_DOCKER=1
default=$(.venv/bin/python -c 'from kvbake.engines.adapters.client import Engine; print(Engine().profile().name)')
# The field runs Docker 25 or later on either store; on Debian 12 those are the two other profiles, which run every
# docker test not marked default_engine_only. The pass on Docker 20.10 (Debian 12's own engine) runs the unit tests,
# the tests marked default_engine_only and the main job's modules (marked every_engine), never field_engines_only.
selection=()
if [ "$default" = docker-20.10-classic ] && [ "${KVBAKE_PROFILES:-all}" != default ]; then
  selection=(-m "not field_engines_only and (not docker or default_engine_only or every_engine)")
elif [ "$default" = docker-20.10-classic ]; then
  selection=(-m "not field_engines_only")
fi
# Every other profile runs the docker tests (all but those marked default_engine_only), each with its own engines and
# temporary folder, at the same time as the whole suite on the default engine. Their output follows the default pass,
# one profile after the other.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
profiles=()
if [ "${KVBAKE_PROFILES:-all}" != default ]; then
  profiles=($(.venv/bin/python scripts/engines.py --others))
fi
# Tests whose subject is no image store (serve shapes, launchers, readiness, the real serves) are marked once_on_classic
# or once_on_containerd: when this run has Docker 26.1 on both stores, each runs on the one its mark names, and the
# other store's pass leaves it out. Every other docker test runs on both stores.
both_stores() {  # "yes" when the profiles named in its arguments include Docker 26.1 on both stores
  local classic="" containerd="" profile
  for profile in "$@"; do
    [ "$profile" = docker-26.1-classic ] && classic=yes
    [ "$profile" = docker-26.1-containerd ] && containerd=yes
  done
  [ -n "$classic" ] && [ -n "$containerd" ] && echo yes
  return 0
}
split=$(both_stores "$default" "${profiles[@]}")
store_split() {  # the -m clause that leaves out the other store's once_on_* tests, or nothing
  case "$split:$1" in
    yes:docker-26.1-classic) echo " and not once_on_containerd" ;;
    yes:docker-26.1-containerd) echo " and not once_on_classic" ;;
  esac
}
for profile in "${profiles[@]}"; do
  echo "test: the integration suite on engine profile $profile (in parallel)"
  KVBAKE_TEST_PROFILE=$profile .venv/bin/python -m pytest -m "docker and not default_engine_only$(store_split "$profile")" \
    --durations=15 --basetemp "$logs/$profile.tmp" "$@" >"$logs/$profile.log" 2>&1 &
  pids+=($!)
done
if [ ${#selection[@]} -eq 0 ] && [ -n "$(store_split "$default")" ]; then
  clause=$(store_split "$default")
  selection=(-m "${clause# and }")  # Debian 13: the default engine is Docker 26.1 on the classic store
fi
echo "test: the whole suite on the default engine, profile $default"
failed=0
.venv/bin/python -m pytest --durations=25 "${selection[@]}" "$@" || failed=$?
for i in "${!profiles[@]}"; do
  status=0
  wait "${pids[$i]}" || status=$?
  echo "test: engine profile ${profiles[$i]}: exit $status"
  cat "$logs/${profiles[$i]}.log"
  # Exit code 5 means the selection had no docker test (for example `test.sh tests/unit`); anything else counts.
  if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
    failed=$status
  fi
done
exit "$failed"
