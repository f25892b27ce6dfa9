#!/usr/bin/env bash
# Mutation-testing run over kvbake's pure core with mutmut, in a scratch copy of the repository.
#
# The run is a measurement, not part of CI: mutmut lives in its own virtual environment (never the
# project's), its configuration is written into the scratch copy only, and only tests/unit runs. A unit
# test that already fails on the unmutated copy is named and left out (it would "kill" every mutant).
#
#   bash scripts/mutation.sh                          # every module below
#   bash scripts/mutation.sh --modules ship/core/running,bake/core/thin_layer  # a subset
#   bash scripts/mutation.sh --keep                   # leave the scratch copy for `mutmut show NAME`
#
# Options:
#   --modules a,b,...   modules to mutate, as paths below kvbake/ without ".py" (default: all of MODULES)
#   --workdir DIR       use DIR (absent or empty) as the scratch copy, and keep it afterwards
#   --keep              keep the temporary scratch copy and print where it is
#   --children N        mutmut workers at a time (default 1: the machine is shared)
#   --min-score P       exit 3 when the total score is below P percent
# Environment:
#   KVBAKE_MUTATION_VENV  the virtual environment holding mutmut (default: ~/.cache/kvbake/mutation-venv);
#                         created and filled on first use.
set -euo pipefail

MUTMUT_VERSION="3.8.1"
MODULES=(bake/core/image_checks ship/core/running operate/core/presets operate/core/prefix_identity bake/core/thin_layer
         bake/core/plan bake/core/derived_image ship/core/journal ship/adapters/transitions)

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KVBAKE_MUTATION_VENV:-$HOME/.cache/kvbake/mutation-venv}"
selected=""
workdir=""
keep=0
children=1
min_score=""

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
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "mutation.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [[ -n "$selected" ]]; then
  IFS=',' read -r -a chosen <<<"$selected"
  for module in "${chosen[@]}"; do
    if [[ ! " ${MODULES[*]} " == *" $module "* ]]; then
      echo "mutation.sh: $module is not one of: ${MODULES[*]}" >&2
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

# --- the scratch copy ------------------------------------------------------------------------
if [[ -n "$workdir" ]]; then
  keep=1
  if [[ -e "$workdir" ]] && [[ -n "$(ls -A "$workdir")" ]]; then
    echo "mutation.sh: --workdir $workdir is not empty; every run starts from a fresh copy" >&2
    exit 2
  fi
  mkdir -p "$workdir"
  scratch="$(cd "$workdir" && pwd)"
else
  scratch="$(mktemp -d "${TMPDIR:-/tmp}/kvbake-mutation.XXXXXX")"
fi
cleanup() { if [[ $keep -eq 0 ]]; then rm -rf "$scratch"; fi; }
trap cleanup EXIT

echo "== copying the work tree (tracked and untracked, not ignored) into the scratch copy"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' path; do [[ -e "$path" ]] && printf '%s\0' "$path"; done \
  | tar --null -T - -cf -) | (cd "$scratch" && tar -xf -)

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
pytest_add_cli_args_test_selection = ["tests/unit", ${leave_out%, }]
pytest_add_cli_args = ["-p", "no:cacheprovider"]
use_git_change_detection = false
EOF

# --- the run ---------------------------------------------------------------------------------
echo "== mutmut $MUTMUT_VERSION over: ${chosen[*]} (tests/unit only, $children worker(s))"
started=$(date +%s)
status=0
(cd "$scratch" && "$venv/bin/mutmut" run --max-children "$children") || status=$?
finished=$(date +%s)
if [[ $status -ne 0 ]]; then
  echo "mutation.sh: mutmut run exited $status" >&2
  exit $status
fi

# --- the figures -----------------------------------------------------------------------------
report_args=(--seconds "$((finished - started))" --json mutants/mutation-summary.json)
[[ -n "$min_score" ]] && report_args+=(--min-score "$min_score")
status=0
(cd "$scratch" && "$venv/bin/python" "$repo/scripts/mutation_report.py" "${report_args[@]}" "${chosen[@]}") || status=$?
if [[ $keep -eq 1 ]]; then
  echo "== scratch copy kept in $scratch (cd there; $venv/bin/mutmut show NAME)"
fi
exit $status
