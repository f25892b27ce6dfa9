"""Summarise a mutmut run (per module and in total) from the results it leaves in mutants/."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path

# Survivors judged equivalent live in mutation_equivalents/<stage>.yaml: mutant name -> the mutated line exactly as
# mutmut writes it ("line") and why no test can tell it apart ("why"). A listed name leaves the adjusted denominator
# only while it survives AND its mutated line still reads the same, so renumbering after a source change can never
# hide a new survivor.
EQUIVALENTS_DIR = Path(__file__).resolve().parent / "mutation_equivalents"


def load_equivalents(folder: Path = EQUIVALENTS_DIR) -> dict[str, tuple[str, str]]:
    """Every stage file's entries, as mutant name -> (mutated line, reason)."""
    import yaml

    known: dict[str, tuple[str, str]] = {}
    for path in sorted(folder.glob("*.yaml")):
        for name, entry in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).items():
            known[name] = (entry["line"], entry["why"])
    return known


# mutmut 3's exit codes, folded into the columns of the report
KILLED_CODES = {1, 3}
SURVIVED_CODES = {0}
NO_TESTS_CODES = {5, 33}
TIMEOUT_CODES = {36, -24, 24, 152, 255}
SKIPPED_CODES = {34, 37}
COLUMNS = ("generated", "killed", "survived", "no_tests", "timeout", "suspicious", "skipped", "unchecked")


# Used as a pytest plugin (-p mutation_report) for the baseline run: tests that already fail on the unmutated
# copy are written to the file named by this variable, so that the mutation run can leave them out.
FAILURES_FILE_ENV = "MUTATION_BASELINE_FAILURES_FILE"


def _record_failure(option: str, nodeid: str) -> None:
    with open(os.environ[FAILURES_FILE_ENV], "a", encoding="utf-8") as out:
        out.write(f"{option}={nodeid}\n")


def pytest_collectreport(report) -> None:  # pragma: no cover - runs inside pytest
    """A test file that cannot be collected is ignored whole."""
    if report.failed and os.environ.get(FAILURES_FILE_ENV):
        _record_failure("--ignore", report.nodeid)


def pytest_runtest_logreport(report) -> None:  # pragma: no cover - runs inside pytest
    """A test that fails (in setup, call or teardown) is deselected."""
    if report.failed and os.environ.get(FAILURES_FILE_ENV):
        _record_failure("--deselect", report.nodeid)


def classify(exit_code: int | None) -> str:
    """The report's column for one mutant's exit code."""
    if exit_code is None:
        return "unchecked"
    if exit_code in KILLED_CODES:
        return "killed"
    if exit_code in SURVIVED_CODES:
        return "survived"
    if exit_code in NO_TESTS_CODES:
        return "no_tests"
    if exit_code in TIMEOUT_CODES:
        return "timeout"
    if exit_code in SKIPPED_CODES:
        return "skipped"
    return "suspicious"


def score(counts: Counter[str]) -> float | None:
    """(killed + timeout) / (killed + timeout + survived + no_tests), in percent."""
    caught = counts["killed"] + counts["timeout"]
    judged = caught + counts["survived"] + counts["no_tests"]
    return None if judged == 0 else 100.0 * caught / judged


def mutated_line(diff: str) -> str:
    """The first added line of mutmut's diff, stripped: what the mutant changed the code to."""
    for line in diff.splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            return line[1:].strip()
    return ""


STRING_LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')


def prose_only(diff: str) -> bool:
    """True when the mutant only rewords a sentence: one string literal holding at least two spaces (text for a
    person: a message, a fix, a help line) wrapped in "XX" or put in upper or lower case, and nothing else changed.
    The tests assert behaviour (exit code, state, the named field) and never a whole text, so such a mutant is
    reported in a column of its own and left out of the adjusted score."""
    removed = [line[1:] for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    if len(removed) != 1 or len(added) != 1:
        return False
    before, after = STRING_LITERAL.findall(removed[0]), STRING_LITERAL.findall(added[0])
    if len(before) != len(after) or STRING_LITERAL.sub("S", removed[0]) != STRING_LITERAL.sub("S", added[0]):
        return False
    changed = [(old, new) for old, new in zip(before, after) if old != new]
    if len(changed) != 1:
        return False
    old, new = changed[0][0][1:-1], changed[0][1][1:-1]
    return reworded(old, new) or reworded_inside(old, new)


def reworded(old: str, new: str) -> bool:
    """True when `new` is the sentence `old` wrapped in XX or in upper or lower case."""
    return old.count(" ") >= 2 and new in (f"XX{old}XX", old.upper(), old.lower())


def reworded_inside(old: str, new: str) -> bool:
    """True when an f-string's text differs only in one literal nested in it (`{x or 'a sentence'}`) and that
    literal is reworded."""
    before, after = STRING_LITERAL.findall(old), STRING_LITERAL.findall(new)
    if len(before) != len(after) or STRING_LITERAL.sub("S", old) != STRING_LITERAL.sub("S", new):
        return False
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    return len(changed) == 1 and reworded(changed[0][0][1:-1], changed[0][1][1:-1])


def diff_of(mutant: str, module_path: Path) -> str:
    """mutmut's own diff for one mutant (read from the mutated copy, without running anything)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    return get_diff_for_mutant(mutant, path=module_path)


def format_score(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} %"


def stage_of(module: str) -> str:
    """The stage folder a module belongs to (`ship/`, `kvarith/`, ...), or `top level` for kvbake/*.py."""
    folder, _, rest = module.partition("/")
    return f"{folder}/" if rest else "top level"


def stage_counts(per_module: dict[str, Counter[str]]) -> dict[str, Counter[str]]:
    """The per-module counts summed per stage folder, in name order."""
    stages: dict[str, Counter[str]] = {}
    for module, counts in per_module.items():
        stages.setdefault(stage_of(module), Counter()).update(counts)
    return dict(sorted(stages.items()))


def read_results(modules: list[str]) -> tuple[dict[str, Counter[str]], list[tuple[str, str, str, Path]]]:
    """Per-module counts, and every survivor as (module, mutant name, column, source path)."""
    per_module: dict[str, Counter[str]] = {}
    survivors: list[tuple[str, str, str, Path]] = []
    for module in modules:
        source = Path("kvbake") / f"{module}.py"
        meta = Path("mutants") / f"{source}.meta"
        counts: Counter[str] = Counter()
        if meta.exists():
            exit_codes = json.loads(meta.read_text())["exit_code_by_key"]
            for name, code in sorted(exit_codes.items()):
                column = classify(code)
                counts[column] += 1
                counts["generated"] += 1
                if column in ("survived", "no_tests"):
                    survivors.append((module, name, column, source))
        per_module[module] = counts
    return per_module, survivors


def without(counts: dict[str, Counter[str]], left_out: Counter[tuple[str, str]]) -> dict[str, Counter[str]]:
    """The counts with the equivalent survivors (keyed by (module, column)) taken out."""
    adjusted = {}
    for module, module_counts in counts.items():
        adjusted[module] = Counter(module_counts)
        for (where, column), number in left_out.items():
            if where == module:
                adjusted[module][column] -= number
    return adjusted


def print_table(title: str, rows: dict[str, Counter[str]], adjusted: dict[str, Counter[str]], prose: Counter[str],
                label) -> None:
    """One row per key; `prose[key]` of its left-out survivors only reword a sentence, the rest are argued equivalent."""
    print(f"\n| {title} | generated | killed | survived | no tests | timeout | suspicious | skipped | score"
          " | equivalent left out | prose only left out | score without them |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key, counts in rows.items():
        cells = " | ".join(str(counts[c]) for c in COLUMNS[:-1])
        left_out = counts["survived"] + counts["no_tests"] - adjusted[key]["survived"] - adjusted[key]["no_tests"]
        print(f"| {label(key)} | {cells} | {format_score(score(counts))} | {left_out - prose[key]} | {prose[key]}"
              f" | {format_score(score(adjusted[key]))} |")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("modules", nargs="+", help="modules as paths below kvbake/, without .py")
    parser.add_argument("--seconds", type=int, default=None, help="how long the run took")
    parser.add_argument("--min-score", type=float, default=None,
                        help="exit 3 when the total, or with --stages any stage, is below this score"
                             " (equivalent survivors left out)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("--stages", action="store_true", help="also print one row per stage folder")
    args = parser.parse_args(argv)

    per_module, survivors = read_results(args.modules)
    known = load_equivalents()
    equivalent: list[tuple[str, str]] = []
    live: list[tuple[str, str, str]] = []
    left_out: Counter[tuple[str, str]] = Counter()
    prose: Counter[str] = Counter()
    for module, name, column, source in survivors:
        diff = diff_of(name, source)
        entry = known.get(name)
        if entry is not None and entry[0] == mutated_line(diff):
            equivalent.append((name, entry[1]))
            left_out[(module, column)] += 1
        elif prose_only(diff):
            prose[module] += 1
            left_out[(module, column)] += 1
        else:
            live.append((name, column, diff))

    total: Counter[str] = Counter()
    for counts in per_module.values():
        total.update(counts)
    adjusted_modules = without(per_module, left_out)
    adjusted_total: Counter[str] = Counter()
    for counts in adjusted_modules.values():
        adjusted_total.update(counts)
    prose_total = Counter({"total": sum(prose.values())})
    print_table("module", {**per_module, "total": total}, {**adjusted_modules, "total": adjusted_total},
                prose + prose_total, lambda m: "**total**" if m == "total" else f"`{m}.py`")
    per_stage = stage_counts(per_module)
    adjusted_stages = stage_counts(adjusted_modules)
    if args.stages:
        prose_stages = Counter({stage: sum(n for m, n in prose.items() if stage_of(m) == stage) for stage in per_stage})
        print_table("stage", per_stage, adjusted_stages, prose_stages, lambda stage: f"`{stage}`")
    if total["unchecked"]:
        print(f"\n{total['unchecked']} mutant(s) were never checked (the run was interrupted).")
    print(
        "\nscore = (killed + timeout) / (killed + timeout + survived + no tests); timeouts count as killed,"
        " mutants no test reaches count as survivors; suspicious and skipped mutants are left out."
    )
    print(f"\ntotal score, every mutant counted:          {format_score(score(total))}")
    print(f"total score, {len(equivalent)} equivalent and {prose_total['total']} prose-only survivors left out:"
          f" {format_score(score(adjusted_total))}")
    if args.seconds is not None:
        print(f"run time: {args.seconds // 60} min {args.seconds % 60} s")
    if equivalent:
        print("\nequivalent survivors:")
        for name, reason in equivalent:
            print(f"  {name}: {reason}")
    if live:
        print(f"\n{len(live)} survivor(s) not known to be equivalent:")
        for name, column, diff in live:
            print(f"\n# {name} ({column.replace('_', ' ')})\n{diff}")

    if args.json is not None:
        figures = {
            "modules": {m: dict(c) for m, c in per_module.items()},
            "stages": {m: dict(c) for m, c in per_stage.items()},
            "stage_scores": {m: score(c) for m, c in adjusted_stages.items()},
            "total": dict(total),
            "score": score(total),
            "adjusted_score": score(adjusted_total),
            "equivalent": dict(equivalent),
            "prose_only": dict(prose),
            "live_survivors": [name for name, _, _ in live],
            "seconds": args.seconds,
        }
        args.json.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    return check_minimum(args, adjusted_total, adjusted_stages)


def check_minimum(args, adjusted_total: Counter[str], adjusted_stages: dict[str, Counter[str]]) -> int:
    """3 when the total (or, with --stages, any stage) is below --min-score, else 0."""
    if args.min_score is None:
        return 0
    scored = {"total": adjusted_total, **(adjusted_stages if args.stages else {})}
    low = [f"{name} {format_score(score(c))}" for name, c in scored.items()
           if score(c) is None or score(c) < args.min_score]
    if low:
        print(f"\nbelow {args.min_score} %: {', '.join(low)}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
