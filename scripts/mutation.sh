#!/usr/bin/env bash
# Mutation-testing run over kvbake with mutmut, in a scratch copy of the repository.
#
# The run is a measurement, not part of CI: mutmut lives in its own virtual environment (never the
# project's), its configuration is written into the scratch copy only, and only tests/unit runs. A unit
# test that already fails on the unmutated copy is named and left out (it would "kill" every mutant), and so is
# every test marked reads_source: it reads kvbake's source text or its classes' members, and mutmut's copy holds
# every mutant beside the code it mutates (a mutant's strings, a mutant's method name on the class).
# Every module of kvbake/ is mutated unless --modules narrows it (the development rig, kvbake_rig/, is no part of it).
#
#   bash scripts/mutation.sh                          # every module of kvbake/
#   bash scripts/mutation.sh --modules ship,secretscan  # stage folders or modules (paths below kvbake/)
#   bash scripts/mutation.sh --workdir DIR            # a run that can stop and go on later in DIR
#   bash scripts/mutation.sh --keep                   # leave the scratch copy for `mutmut show NAME`
#
# Options:
#   --modules a,b,...   folders or modules to mutate, as paths below kvbake/ without ".py" (default: all)
#   --workdir DIR       use DIR as the scratch copy and keep it. When DIR holds an earlier run, the work tree is
#                       copied over it again and mutmut goes on: a mutant keeps its result while the function it
#                       mutates is unchanged, so a long run can be stopped and resumed
#   --report-only       with --workdir: print the figures of what DIR holds (and write them to
#                       DIR/mutants/mutation-summary.json, for scripts/mutation_whole.py), run nothing
#   --results FILE      with --workdir: carry mutmut's results between machines in FILE (a .tar.gz of its per-module
#                       .meta files). Before the run, a module DIR holds no result for takes FILE's; after the run
#                       (or --report-only), FILE is written again from DIR. A result stays valid while the function
#                       it mutates is unchanged: mutmut checks each function's hash and runs a changed one's mutants again
#   --keep              keep the temporary scratch copy and print where it is
#   --children N        mutmut workers at a time (default 1: the machine is shared)
#   --min-score P       exit 3 when the total score is below P percent
#   --timeout-multiplier X  a mutant times out (and counts as killed) after X times its tests' time plus X seconds
#                       (default 15, mutmut's own). A lower X shortens the mutants that loop for ever (a loop bound
#                       mutated); keep it the same across a resumed run: mutmut runs every timed-out mutant again
#                       when it changes
# Environment:
#   KVBAKE_MUTATION_VENV  the virtual environment holding mutmut (default: ~/.cache/kvbake/mutation-venv);
#                         created and filled on first use.
#   KVBAKE_MODEL_STEPS    the rollout model's steps per mutant (default here 400, not CI's 10,000: every ship
#                         mutant runs it)
#   KVBAKE_MODEL_SHRINK   0 by default here: a model run that fails stops at the failure it found, with no search for
#                         a shorter one (that search can outlast a mutant's timeout; a kill needs only the failure)
set -euo pipefail

MUTMUT_VERSION="3.8.1"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export KVBAKE_MODEL_STEPS="${KVBAKE_MODEL_STEPS:-400}"
export KVBAKE_MODEL_SHRINK="${KVBAKE_MODEL_SHRINK:-0}"
venv="${KVBAKE_MUTATION_VENV:-$HOME/.cache/kvbake/mutation-venv}"
selected=""
workdir=""
keep=0
children=1
min_score=""
timeout_multiplier="15.0"
report_only=0
results=""

while [[ $# -gt 0 ]]; do
  case "$1" in
    --modules) selected="$2"; shift 2 ;;
    --modules=*) selected="${1#*=}"; shift ;;
    --workdir) workdir="$2"; shift 2 ;;
    --workdir=*) workdir="${1#*=}"; shift ;;
    --keep) keep=1; shift ;;
    --children) children="$2"; shift 2 ;;
    --children=*) children="${1#*=}"; shift ;;
    --min-score) min_score="$2"; shift 2 ;;
    --min-score=*) min_score="${1#*=}"; shift ;;
    --timeout-multiplier) timeout_multiplier="$2"; shift 2 ;;
    --timeout-multiplier=*) timeout_multiplier="${1#*=}"; shift ;;
    --report-only) report_only=1; shift ;;
    --results) results="$2"; shift 2 ;;
    --results=*) results="${1#*=}"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "mutation.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

[[ "$timeout_multiplier" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "mutation.sh: --timeout-multiplier takes a number, not $timeout_multiplier" >&2; exit 2; }

# every module of the package, as paths below kvbake/ without ".py"
mapfile -t MODULES < <(cd "$repo" && git ls-files 'kvbake/*.py' | sed -e 's|^kvbake/||' -e 's|\.py$||' | sort)

if [[ -n "$selected" ]]; then
  IFS=',' read -r -a chosen <<<"$selected"
  wanted=("${chosen[@]}")
  chosen=()
  for want in "${wanted[@]}"; do
    found=0
    for module in "${MODULES[@]}"; do
      if [[ "$module" == "$want" || "$module" == "$want"/* ]]; then chosen+=("$module"); found=1; fi
    done
    if [[ $found -eq 0 ]]; then
      echo "mutation.sh: $want names no module or folder below kvbake/" >&2
      exit 2
    fi
  done
else
  chosen=("${MODULES[@]}")
fi

# --- the tool's own environment -------------------------------------------------------------
if [[ ! -x "$venv/bin/mutmut" ]] || [[ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mutmut"))' 2>/dev/null)" != "$MUTMUT_VERSION" ]]; then
  echo "== preparing $venv (mutmut $MUTMUT_VERSION and the project's dependencies)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "mutmut==$MUTMUT_VERSION" "$repo[test]"
  # the mutated copy must be the only kvbake on the path
  "$venv/bin/pip" uninstall -q -y kvbake
fi

if [[ -n "$results" ]]; then
  [[ -n "$workdir" ]] || { echo "mutation.sh: --results needs --workdir" >&2; exit 2; }
  results="$(cd "$(dirname "$results")" && pwd)/$(basename "$results")"
fi

# the .meta files of DIR/mutants (mutmut's results, per module), packed the same way every time
save_results() {
  [[ -n "$results" && -d "$scratch/mutants/kvbake" ]] || return 0
  (cd "$scratch" && find mutants/kvbake -name '*.py.meta' -print0 | sort -z \
    | tar --null -T - --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - | gzip -n >"$results.part")
  mv "$results.part" "$results"
  echo "== results of $(tar -tzf "$results" | wc -l) module(s) saved to $results"
}

# --- the scratch copy ------------------------------------------------------------------------
resuming=0
if [[ -n "$workdir" ]]; then
  keep=1
  if [[ -e "$workdir" ]] && [[ -n "$(ls -A "$workdir")" ]]; then
    if [[ ! -d "$workdir/mutants" ]]; then
      echo "mutation.sh: --workdir $workdir is not empty and holds no earlier run; name an empty or absent folder" >&2
      exit 2
    fi
    resuming=1
  fi
  mkdir -p "$workdir"
  scratch="$(cd "$workdir" && pwd)"
  if [[ $report_only -eq 1 ]]; then
    [[ $resuming -eq 1 ]] || { echo "mutation.sh: --report-only needs a --workdir with an earlier run" >&2; exit 2; }
    save_results
    cd "$scratch" && exec "$venv/bin/python" "$repo/scripts/mutation_report.py" --stages --json mutants/mutation-summary.json \
      "${chosen[@]}"
  fi
  if [[ $resuming -eq 1 ]]; then
    echo "== going on with the run in $scratch: its copy of the work tree is replaced, mutmut's results are kept"
    find "$scratch" -mindepth 1 -maxdepth 1 ! -name mutants -exec rm -rf {} +
  fi
else
  [[ $report_only -eq 0 ]] || { echo "mutation.sh: --report-only needs --workdir" >&2; exit 2; }
  scratch="$(mktemp -d "${TMPDIR:-/tmp}/kvbake-mutation.XXXXXX")"
fi
cleanup() { if [[ $keep -eq 0 ]]; then rm -rf "$scratch"; fi; }
trap cleanup EXIT

echo "== copying the work tree (tracked and untracked, not ignored) into the scratch copy"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' path; do [[ -e "$path" ]] && printf '%s\0' "$path"; done \
  | tar --null -T - -cf -) | (cd "$scratch" && tar -xf -)

if [[ -n "$results" && -f "$results" ]]; then
  echo "== results carried in from $results (a module that $scratch already holds keeps its own)"
  mkdir -p "$scratch/mutants"
  tar -xzf "$results" -C "$scratch" --skip-old-files
fi

echo "== baseline: tests/unit on the unmutated copy"
baseline="$scratch/.mutation-baseline"
mkdir -p "$baseline"
baseline_failures="$baseline/failures"
: >"$baseline_failures"
# the helper doubles as a pytest plugin that writes down the failing tests; give it a folder of its own
cp "$repo/scripts/mutation_report.py" "$baseline/"
(cd "$scratch" && PYTHONPATH="$baseline" MUTATION_BASELINE_FAILURES_FILE="$baseline_failures" \
  "$venv/bin/python" -m pytest tests/unit -q -p no:cacheprovider -p mutation_report >"$baseline/pytest.log" 2>&1) || true
tail -n 1 "$baseline/pytest.log"
leave_out=""
while IFS= read -r line; do
  [[ -n "$line" ]] || continue
  echo "   left out of the run (fails on the unmutated copy): ${line#*=}"
  line="${line//\\/\\\\}"
  leave_out+="\"${line//\"/\\\"}\", "
done < <(sort -u "$baseline_failures")

only_mutate=""
for module in "${chosen[@]}"; do only_mutate+="\"kvbake/$module.py\", "; done
also_copy=""
for entry in "$scratch"/* "$scratch"/.[!.]*; do
  [[ -e "$entry" ]] || continue
  name="$(basename "$entry")"
  case "$name" in kvbake|tests|mutants|pyproject.toml|.git|.mutation-baseline|.hypothesis) continue ;; esac
  also_copy+="\"$name\", "
done

cat >>"$scratch/pyproject.toml" <<EOF

[tool.mutmut]
source_paths = ["kvbake/"]
only_mutate = [${only_mutate%, }]
also_copy = [${also_copy%, }]
pytest_add_cli_args_test_selection = ["tests/unit", "-m", "not reads_source", ${leave_out%, }]
pytest_add_cli_args = ["-p", "no:cacheprovider"]
use_git_change_detection = false
timeout_multiplier = $timeout_multiplier
EOF

# --- the run ---------------------------------------------------------------------------------
echo "== mutmut $MUTMUT_VERSION over: ${chosen[*]} (tests/unit only, $children worker(s))"
started=$(date +%s)
status=0
(cd "$scratch" && "$venv/bin/mutmut" run --max-children "$children") || status=$?
finished=$(date +%s)
save_results
if [[ $status -ne 0 ]]; then
  echo "mutation.sh: mutmut run exited $status" >&2
  exit $status
fi

# --- the figures -----------------------------------------------------------------------------
report_args=(--stages --seconds "$((finished - started))" --json mutants/mutation-summary.json)
[[ -n "$min_score" ]] && report_args+=(--min-score "$min_score")
status=0
(cd "$scratch" && "$venv/bin/python" "$repo/scripts/mutation_report.py" "${report_args[@]}" "${chosen[@]}") || status=$?
if [[ $keep -eq 1 ]]; then
  echo "== scratch copy kept in $scratch (cd there; $venv/bin/mutmut show NAME)"
fi
exit $status
