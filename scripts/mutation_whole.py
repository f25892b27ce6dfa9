"""The whole code's mutation figures: fresh runs for the modules that changed, the recorded rows for the rest.

A run over every module takes more hours than the code changes between two measurements allow, and mutmut keeps a
result only while the function it mutates is unchanged. So the whole-code figure is put together module by module:
a module measured by a fresh run (`--fresh`, the `--json` figures of `scripts/mutation_report.py`) takes that run's
counts; every other module takes its row from the sections of docs/mutation.md named with `--earlier` (a later
section wins). A module with code to mutate that neither holds is named, and the exit code is 4. A fresh run that
left mutants unchecked is refused, unless `--so-far` asks for the figure of the checked mutants only: the last line
then says how many were left out.

    python scripts/mutation_whole.py --earlier "The whole code, stage by stage" \\
        --earlier "The fence and the node state" --fresh 2026-12-06=DIR/mutants/mutation-summary.json

prints one table row per module, one per stage, and the whole code's score.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from mutation_report import stage_of  # the same stage folders as the per-run report

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| `(?P<module>[\w/]+)\.py` \|(?P<cells>.*)\|\s*$")
NUMBER = re.compile(r"^[\d,]+$")


@dataclass(frozen=True)
class Figures:
    """One module's judged mutants (killed + survived) and how its survivors split."""

    mutants: int
    killed: int
    survived: int
    equivalent: int
    prose: int
    measured: str
    unchecked: int = 0  # mutants a fresh run has not checked yet (counted nowhere else; only with --so-far)

    @property
    def score(self) -> float:
        return 100.0 * self.killed / self.mutants if self.mutants else 100.0

    @property
    def score_without(self) -> float:
        judged = self.mutants - self.equivalent - self.prose
        return 100.0 * self.killed / judged if judged else 100.0


def number(cell: str) -> int:
    return int(cell.strip().replace(",", ""))


def sections(text: str) -> dict[str, str]:
    """Every `##`/`###`... heading's text up to the next heading of the same or a higher level."""
    found: dict[str, str] = {}
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = re.match(r"^(#+) (.*)$", line)
        if not match:
            continue
        level, end = len(match.group(1)), len(lines)
        for later in range(index + 1, len(lines)):
            other = re.match(r"^(#+) ", lines[later])
            if other and len(other.group(1)) <= level:
                end = later
                break
        found[match.group(2)] = "\n".join(lines[index + 1:end])
    return found


def recorded_rows(text: str, label: str) -> dict[str, Figures]:
    """The per-module rows of one section: the first number column is the mutants; the last six columns end with
    killed, survived, score, equivalent, prose only, score without them (the layout of every module table)."""
    rows: dict[str, Figures] = {}
    for line in text.splitlines():
        match = ROW.match(line)
        if not match:
            continue
        cells = [cell.strip() for cell in match.group("cells").split("|")]
        if len(cells) < 7 or not NUMBER.match(cells[0]):
            continue
        rows[match.group("module")] = Figures(number(cells[0]), number(cells[-6]), number(cells[-5]),
                                              number(cells[-3]), number(cells[-2]), label)
    return rows


def module_of(mutant: str) -> str:
    """`kvbake.ship.core.x.xǁCǁf__mutmut_3` -> `ship/core/x`."""
    return mutant.rsplit(".", 1)[0].removeprefix("kvbake.").replace(".", "/")


def fresh_rows(summary: dict, label: str, so_far: bool = False) -> dict[str, Figures]:
    """The modules of one `mutation_report.py --json` file; with `so_far`, a module's checked mutants only."""
    equivalent = Counter(module_of(name) for name in summary.get("equivalent", {}))
    rows = {}
    for module, counts in summary["modules"].items():
        killed = counts.get("killed", 0) + counts.get("timeout", 0)
        survived = counts.get("survived", 0) + counts.get("no_tests", 0)
        if counts.get("unchecked", 0) and not so_far:
            raise SystemExit(f"mutation_whole: {label} left {counts['unchecked']} mutant(s) of {module} unchecked;"
                             " finish that run first (the same mutation.sh command with its --workdir)")
        rows[module] = Figures(killed + survived, killed, survived, equivalent[module],
                               summary.get("prose_only", {}).get(module, 0), label, counts.get("unchecked", 0))
    return rows


def only_a_signature(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """True for a body of nothing but a docstring, `...` or `pass` (a Protocol's method): nothing to mutate."""
    return all(isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))
               for statement in function.body)


def modules_with_code() -> list[str]:
    """Every module of kvbake/ with a function body to mutate (mutmut mutates function bodies only)."""
    found = []
    for path in (ROOT / "kvbake").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if any(not only_a_signature(function) for function in functions):
            found.append(path.relative_to(ROOT / "kvbake").with_suffix("").as_posix())
    return sorted(found)


def total(rows: list[Figures], label: str) -> Figures:
    counted = ("mutants", "killed", "survived", "equivalent", "prose", "unchecked")
    return Figures(**{field: sum(getattr(row, field) for row in rows) for field in counted}, measured=label)


def table_line(name: str, row: Figures) -> str:
    return (f"| {name} | {row.measured} | {row.mutants:,} | {row.killed:,} | {row.survived:,} | {row.score:.1f} % |"
            f" {row.equivalent:,} | {row.prose:,} | {row.score_without:.1f} % |")


HEADER = ("| {} | measured | mutants | killed (+ timeout) | survived | score | equivalent | prose only |"
          " score without them |\n|---|---|---:|---:|---:|---:|---:|---:|---:|")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "mutation.md")
    parser.add_argument("--earlier", action="append", default=[], metavar="HEADING",
                        help="a section of --doc whose module rows stand for unchanged modules (start of its heading)")
    parser.add_argument("--fresh", action="append", default=[], metavar="LABEL=JSON",
                        help="a fresh run's figures (mutation_report.py --json), labelled e.g. with its date")
    parser.add_argument("--so-far", action="store_true",
                        help="take a fresh run that has not checked every mutant yet: its checked mutants only")
    args = parser.parse_args(argv)

    found = sections(args.doc.read_text(encoding="utf-8"))
    rows: dict[str, Figures] = {}
    for heading in args.earlier:
        matching = [title for title in found if title.startswith(heading)]
        if len(matching) != 1:
            print(f"mutation_whole: {len(matching)} sections of {args.doc.name} start with {heading!r}; name one",
                  file=sys.stderr)
            return 2
        date = re.search(r"\(([^)]*\d{4}-\d{2}-\d{2}[^)]*)\)", matching[0])
        rows.update(recorded_rows(found[matching[0]], date.group(1) if date else "earlier"))
    for fresh in args.fresh:
        label, _, path = fresh.partition("=")
        rows.update(fresh_rows(json.loads(Path(path).read_text()), label, args.so_far))

    wanted = modules_with_code()
    missing = [module for module in wanted if module not in rows]
    if missing:
        print(f"mutation_whole: no figures for {len(missing)} module(s): {', '.join(missing)}; run scripts/mutation.sh"
              " --modules over them and pass its figures with --fresh", file=sys.stderr)
        return 4
    current = {module: rows[module] for module in wanted}
    print(HEADER.format("module"))
    for module, row in current.items():
        print(table_line(f"`{module}.py`", row))
    print()
    print(HEADER.format("stage"))
    stages: dict[str, list[Figures]] = {}
    for module, row in current.items():
        stages.setdefault(stage_of(module), []).append(row)
    for stage, members in sorted(stages.items()):
        labels = "; ".join(sorted({row.measured for row in members}))
        print(table_line(f"`{stage}`" if stage != "top level" else stage, total(members, labels)))
    whole = total(list(current.values()), "; ".join(sorted({row.measured for row in current.values()})))
    print(table_line("**the whole code**", whole))
    print(f"\nthe whole code: {whole.mutants:,} mutants, {whole.killed:,} killed, score {whole.score:.1f} %;"
          f" without {whole.equivalent:,} equivalent and {whole.prose:,} prose-only survivors {whole.score_without:.1f} %"
          + (f"; so far: {whole.unchecked:,} mutants not checked yet are counted nowhere" if whole.unchecked else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
