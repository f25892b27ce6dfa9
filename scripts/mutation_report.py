"""Summarise a mutmut run (per module and in total) from the results it leaves in mutants/."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

# Survivors judged equivalent: mutant name -> (the mutated line exactly as mutmut writes it, why no test can
# tell it apart). A listed name leaves the adjusted denominator only while it survives AND its mutated line
# still reads the same, so renumbering after a source change can never hide a new survivor.
EQUIVALENT_MUTANTS: dict[str, tuple[str, str]] = {
    "kvbake.bake.core.image_checks.x_env_names__mutmut_4": (
        'return {item.split("=", )[0] for item in env or ()}', "without maxsplit the first piece is the same name"),
    "kvbake.bake.core.image_checks.x_env_names__mutmut_7": (
        'return {item.split("=", 2)[0] for item in env or ()}', "a larger maxsplit leaves the first piece, the name, alike"),
    "kvbake.bake.core.derived_image.x_derived_config__mutmut_11": (
        'runtime = config.setdefault("config", None) or {}', "an absent runtime section becomes {} through `or {}` either way"),
    "kvbake.bake.core.derived_image.x_derived_config__mutmut_13": (
        'runtime = config.setdefault("config", ) or {}', "setdefault's own default is None, and `or {}` replaces it"),
    "kvbake.bake.core.derived_image.x_write_archive__mutmut_3": (
        'with tarfile.open(fileobj=fileobj, mode="w", format=None) as tar:', "tarfile's default format is PAX"),
    "kvbake.bake.core.derived_image.x_write_archive__mutmut_6": (
        'with tarfile.open(fileobj=fileobj, mode="w", ) as tar:', "tarfile's default format is PAX"),
    "kvbake.bake.core.thin_layer.x_build_layer__mutmut_54": (
        'members.append((name, _info(name, tarfile.REGTYPE, 0o644, 0, 0, mtime, 0), b"XXXX"))',
        "a whiteout's size is 0, so tarfile copies none of its data"),
    "kvbake.bake.core.thin_layer.x_build_layer__mutmut_64": (
        'with tarfile.open(fileobj=buffer, mode="w", format=None) as tar:', "tarfile's default format is PAX"),
    "kvbake.bake.core.thin_layer.x_build_layer__mutmut_67": (
        'with tarfile.open(fileobj=buffer, mode="w", ) as tar:', "tarfile's default format is PAX"),
    "kvbake.bake.core.thin_layer.x_build_layer__mutmut_71": (
        "for _, info, data in sorted(members, key=None):", "names are unique (checked just before), so tuples sort by name alone"),
    "kvbake.bake.core.thin_layer.x_build_layer__mutmut_73": (
        "for _, info, data in sorted(members, ):", "names are unique (checked just before), so tuples sort by name alone"),
    "kvbake.bake.core.thin_layer.x_build_layer__mutmut_81": (
        "tar.addfile(info, io.BytesIO(data) if (data is not None) or True else None)",
        "only directories have no data; their size is 0, so an empty buffer adds nothing"),
    "kvbake.ship.core.journal.x_read_journal__mutmut_8": (
        'return journal_from_dict(json.loads(path.read_bytes().decode("UTF-8")))', "codec names are case-insensitive"),
    "kvbake.ship.core.journal.x_read_diverged__mutmut_8": (
        'data = json.loads(path.read_bytes().decode("UTF-8"))', "codec names are case-insensitive"),
    "kvbake.ship.core.journal.x_read_diverged__mutmut_9": (
        'data = ""', "None and \"\" are both not an object: the same error with the same reason follows"),
    "kvbake.ship.adapters.transitions.x_restart__mutmut_55": (
        "done = subprocess.run(list(launcher.command), env=env, capture_output=True, text=True, timeout=launcher.timeout_s, check=None)",
        "check=None is false like check=False"),
    "kvbake.ship.adapters.transitions.x_restart__mutmut_61": (
        "done = subprocess.run(list(launcher.command), env=env, capture_output=True, text=True, timeout=launcher.timeout_s, )",
        "check defaults to False"),
    "kvbake.operate.core.prefix_identity.x_build_prefix_prompts__mutmut_40": (
        'marker = _divergent_marker(full[shared]) if shared < total else "XXXX"',
        "shared >= total means shared > body, so rest < 0 and the same error follows whatever the marker"),
    "kvbake.operate.core.prefix_identity.x_build_prefix_prompts__mutmut_44": (
        "if rest <= 0:", "rest is 4k - 90 or 4k - 89 (whole tokens less question and marker), never 0"),
    "kvbake.operate.core.prefix_identity.x_build_prefix_prompts__mutmut_45": (
        "if rest < 1:", "rest is 4k - 90 or 4k - 89 (whole tokens less question and marker), never 0"),
    "kvbake.operate.core.prefix_identity.x_output_difference__mutmut_9": (
        "ratio = difflib.SequenceMatcher(None, a, b, autojunk=None).ratio()", "autojunk=None is false like autojunk=False"),
    "kvbake.ship.adapters.transitions.x_apply_side__mutmut_28": (
        "NodeState(None, fleet.engines[plan.node]).update(", "the node name appears only in errors that update() itself catches and drops"),
    "kvbake.ship.adapters.transitions.x_apply_side__mutmut_73": (
        'replaced = {plan.node: release_of(_side(plan, "XXbeforeXX" if side == "after" else "after")[2], "current") for plan in journal.nodes}',
        "_side reads every side but \"after\" as the before side"),
    "kvbake.ship.adapters.transitions.x_apply_side__mutmut_74": (
        'replaced = {plan.node: release_of(_side(plan, "BEFORE" if side == "after" else "after")[2], "current") for plan in journal.nodes}',
        "_side reads every side but \"after\" as the before side"),
    "kvbake.ship.adapters.transitions.x_drop_released_adoption__mutmut_4": (
        'for side in ("XXbeforeXX", "after"):', "_side reads every side but \"after\" as the before side"),
    "kvbake.ship.adapters.transitions.x_drop_released_adoption__mutmut_5": (
        'for side in ("BEFORE", "after"):', "_side reads every side but \"after\" as the before side"),
    "kvbake.ship.adapters.transitions.x_publish__mutmut_7": (
        'NodeState(None, fleet.engines[plan.node]).update(marker_image(fleet, plan), f"{journal.kind} {journal.id} begins",',
        "the node name appears only in errors that update() itself catches and drops"),
    "kvbake.ship.adapters.transitions.x_settle__mutmut_8": (
        'records = NodeState(None, fleet.engines[plan.node]).update(marker_image(fleet, plan), f"{journal.kind} {journal.id} {outcome}",',
        "the node name appears only in errors that update() itself catches and drops"),
    "kvbake.ship.adapters.transitions.x_mark_nodes_diverged__mutmut_7": (
        'NodeState(None, fleet.engines[plan.node]).update(marker_image(fleet, plan), f"{journal.kind} {journal.id} DIVERGED",',
        "the node name appears only in errors that update() itself catches and drops"),
}

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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("modules", nargs="+", help="modules as paths below kvbake/, without .py")
    parser.add_argument("--seconds", type=int, default=None, help="how long the run took")
    parser.add_argument("--min-score", type=float, default=None, help="exit 3 below this total score")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("--stages", action="store_true", help="also print one row per stage folder")
    args = parser.parse_args(argv)

    per_module: dict[str, Counter[str]] = {}
    survivors: list[tuple[str, str, Path]] = []
    for module in args.modules:
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
                    survivors.append((name, column, source))
        per_module[module] = counts

    total: Counter[str] = Counter()
    for counts in per_module.values():
        total.update(counts)

    print()
    print("| module | generated | killed | survived | no tests | timeout | suspicious | skipped | score |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for module, counts in [*per_module.items(), ("total", total)]:
        cells = " | ".join(str(counts[c]) for c in COLUMNS[:-1])
        label = f"**{module}**" if module == "total" else f"`{module}.py`"
        print(f"| {label} | {cells} | {format_score(score(counts))} |")
    per_stage = stage_counts(per_module)
    if args.stages:
        print("\n| stage | generated | killed | survived | no tests | timeout | suspicious | skipped | score |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for stage, counts in per_stage.items():
            cells = " | ".join(str(counts[c]) for c in COLUMNS[:-1])
            print(f"| `{stage}` | {cells} | {format_score(score(counts))} |")
    if total["unchecked"]:
        print(f"\n{total['unchecked']} mutant(s) were never checked (the run was interrupted).")
    print(
        "\nscore = (killed + timeout) / (killed + timeout + survived + no tests); timeouts count as killed,"
        " mutants no test reaches count as survivors; suspicious and skipped mutants are left out."
    )

    equivalent: list[tuple[str, str]] = []
    live: list[tuple[str, str, str]] = []
    for name, column, source in survivors:
        diff = diff_of(name, source)
        known = EQUIVALENT_MUTANTS.get(name)
        if known is not None and known[0] == mutated_line(diff):
            equivalent.append((name, known[1]))
        else:
            live.append((name, column, diff))

    column_of = {name: column for name, column, _ in survivors}
    adjusted = Counter(total)
    adjusted.subtract(Counter(column_of[name] for name, _ in equivalent))
    print(f"\ntotal score, every mutant counted:          {format_score(score(total))}")
    print(f"total score, {len(equivalent):3d} equivalent survivors left out: {format_score(score(adjusted))}")
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
            "total": dict(total),
            "score": score(total),
            "adjusted_score": score(adjusted),
            "equivalent": dict(equivalent),
            "live_survivors": [name for name, _, _ in live],
            "seconds": args.seconds,
        }
        args.json.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")

    final = score(adjusted)
    if args.min_score is not None and (final is None or final < args.min_score):
        print(f"\ntotal score {format_score(final)} is below {args.min_score} %", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
