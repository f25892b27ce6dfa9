#!/usr/bin/env bash
# Set up everything, build the stand-in bases (cached), and run the tests against real engines, in parallel passes:
# the docker tests on the machine's default engine; every docker test but those marked default_engine_only on every
# other engine profile this machine has (Debian 12: Docker 20.10 by default, plus Docker 26.1 on the classic and the
# containerd store; Debian 13: Docker 26.1 classic by default, plus the containerd store); and the tests that need no
# engine. A Docker 20.10 pass runs the default_engine_only tests and those of bake and push (every_engine); never
# field_engines_only. KVBAKE_PROFILES=default runs the default engine only (then 20.10 runs every docker test but
# field_engines_only) beside the tests that need no engine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/docs.sh --check  # the docs site: generated pages current, mkdocs build --strict passes (seconds)
.venv/bin/python scripts/standin_base.py
.venv/bin/python scripts/standin_ray_base.py  # ray on top of the stand-in base: the real-Ray serve shapes
.venv/bin/python scripts/standin_base.py --vllm-version 0.34.0  # the next release: rebase's target in the tests
.venv/bin/python scripts/standin_base_arm64.py
.venv/bin/python scripts/standin_vllm_base.py
.venv/bin/python scripts/standin_vllm_ray_base.py  # ray[default] on the serving base: the community launchers' walks
export KVBAKE_REQUIRE_DOCKER=1
default=$(.venv/bin/python -c 'from kvbake.engines.adapters.client import Engine; print(Engine().profile().name)')
# Every other profile runs the docker tests (all but those marked default_engine_only), each with its own engines and
# temporary folder, at the same time as the default engine's pass. Their output follows the default pass, one profile
# after the other.
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
timed() {  # run a pass, then write its wall time in seconds to $logs/$1.seconds; its exit status is the pass's
  local name=$1 started=$SECONDS status=0
  shift
  "$@" || status=$?
  echo $((SECONDS - started)) >"$logs/$name.seconds"
  return "$status"
}
for profile in "${profiles[@]}"; do
  echo "test: the integration suite on engine profile $profile (in parallel)"
  KVBAKE_TEST_PROFILE=$profile timed "$profile" .venv/bin/python -m pytest -m "docker and not default_engine_only$(store_split "$profile")" \
    --durations=25 --basetemp "$logs/$profile.tmp" "$@" >"$logs/$profile.log" 2>&1 &
  pids+=($!)
done
# The default engine's pass. The field runs Docker 25 or later on either store; on Debian 12 those are the two other
# profiles, which run every docker test not marked default_engine_only. A pass on Docker 20.10 (Debian 12's own engine)
# runs the tests marked default_engine_only and the bake and push modules (marked every_engine), never field_engines_only.
docker_selection() {  # the -m expression of the default engine's pass: $1 its profile, $2 "default" when it runs alone
  if [ "$1" = docker-20.10-classic ] && [ "$2" != default ]; then
    echo "docker and not field_engines_only and (default_engine_only or every_engine)"
  elif [ "$1" = docker-20.10-classic ]; then
    echo "docker and not field_engines_only"
  else
    echo "docker$(store_split "$1")"  # Debian 13: Docker 26.1 on the classic store
  fi
}
# The tests that need no engine (the unit tests, the rollout model) run in a process of their own beside the docker
# passes, at a lower priority (nice 10): they take the CPU the engine-bound tests leave idle, and the run never ends on
# them alone on one core. Their output comes last.
echo "test: the tests that need no engine (in parallel, nice 10)"
timed no-engine nice -n 10 .venv/bin/python -m pytest -m "not docker" --durations=10 --basetemp "$logs/no-engine.tmp" "$@" \
  >"$logs/no-engine.log" 2>&1 &
pids+=($!)
profiles+=(no-engine)
echo "test: the docker tests on the default engine, profile $default"
failed=0
ran=0
status=0
timed "$default" .venv/bin/python -m pytest --durations=40 -m "$(docker_selection "$default" "${KVBAKE_PROFILES:-all}")" "$@" || status=$?
echo "test: $default (the default engine's pass): $(cat "$logs/$default.seconds") s"
counts() {  # fold one pass's exit status into the run's: 5 (its selection had no test) is not a failure
  if [ "$1" -eq 0 ]; then
    ran=1
  elif [ "$1" -ne 5 ]; then
    ran=1
    failed=$1
  fi
}
counts "$status"
for i in "${!profiles[@]}"; do
  status=0
  wait "${pids[$i]}" || status=$?
  echo "test: ${profiles[$i]}: exit $status after $(cat "$logs/${profiles[$i]}.seconds" 2>/dev/null || echo '?') s"
  cat "$logs/${profiles[$i]}.log"
  counts "$status"
done
echo "test: the whole run took $SECONDS s"
if [ "$ran" -eq 0 ]; then
  echo "test: no test matched the selection in any pass"
  exit 5
fi
exit "$failed"
