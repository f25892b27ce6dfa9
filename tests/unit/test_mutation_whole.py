"""The whole-code mutation figures: rows read from the record, and fresh runs over the modules that changed."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "scripts"))

from mutation_whole import (  # noqa: E402
    Figures, fresh_rows, main, module_of, modules_with_code, only_a_signature, recorded_rows, sections,
)

STAGE_TABLE = """
| module | mutants | killed (+ timeout) | survived | score | equivalent | prose only | score without them |
|---|---:|---:|---:|---:|---:|---:|---:|
| `bake/core/plan.py` | 1,272 | 1,271 | 1 | 99.9 % | 0 | 1 | 100.0 % |
| `bake/` | 5,286 | 5,084 | 193 | 96.3 % | 85 | 108 | 100.0 % |
"""
FENCE_TABLE = """
| module | mutants | complete run: killed | survived | now: killed | survived | score | equivalent | prose only | score without them |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| `ship/adapters/nodestate.py` | 149 | 137 | 12 | 140 | 9 | 94.0 % | 9 | 0 | 100.0 % |
"""


def test_a_module_row_of_either_layout_reads_as_its_current_figures() -> None:
    rows = recorded_rows(STAGE_TABLE + FENCE_TABLE, "then")
    assert rows == {
        "bake/core/plan": Figures(1272, 1271, 1, 0, 1, "then"),
        "ship/adapters/nodestate": Figures(149, 140, 9, 9, 0, "then"),
    }


def test_a_fresh_run_counts_timeouts_as_killed_and_untested_mutants_as_survivors() -> None:
    summary = {
        "modules": {"ship/core/x": {"killed": 5, "timeout": 1, "survived": 2, "no_tests": 1, "generated": 9}},
        "equivalent": {"kvbake.ship.core.x.x_f__mutmut_3": "a buffer size", "kvbake.other.x_g__mutmut_1": "elsewhere"},
        "prose_only": {"ship/core/x": 1},
    }
    row = fresh_rows(summary, "today")["ship/core/x"]
    assert row == Figures(9, 6, 3, 1, 1, "today")
    assert row.score == pytest.approx(100 * 6 / 9)
    assert row.score_without == pytest.approx(100 * 6 / 7)


def test_a_fresh_run_with_unchecked_mutants_is_refused() -> None:
    with pytest.raises(SystemExit, match="unchecked"):
        fresh_rows({"modules": {"ship/core/x": {"killed": 1, "unchecked": 2}}}, "today")


def test_a_mutant_name_names_its_module_path() -> None:
    assert module_of("kvbake.ship.core.lock_claims.xǁClaimǁstale__mutmut_12") == "ship/core/lock_claims"
    assert module_of("kvbake.names.x_check_name__mutmut_1") == "names"


def test_a_protocol_method_has_nothing_to_mutate_and_a_real_body_has() -> None:
    tree = ast.parse('class P:\n    def f(self) -> int:\n        """Doc."""\n        ...\n'
                     'def g():\n    pass\n'
                     'def h():\n    return 1\n')
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert {name: only_a_signature(function) for name, function in functions.items()} == {"f": True, "g": True, "h": False}


def test_a_section_holds_its_subsections_and_stops_at_its_sibling() -> None:
    text = "## A (2026-01-01)\nx\n### A1\ny\n## B\nz\n"
    found = sections(text)
    assert found["A (2026-01-01)"] == "x\n### A1\ny"
    assert found["B"] == "z"


def test_a_module_that_no_figures_cover_is_named_with_exit_code_4(tmp_path: Path, capsys) -> None:
    doc = tmp_path / "m.md"
    doc.write_text("## Old (2026-01-01)\n" + STAGE_TABLE)
    assert main(["--doc", str(doc), "--earlier", "Old"]) == 4
    assert "ship/core/fencing" in capsys.readouterr().err


def every_module_recorded_and_one_fresh(tmp_path: Path, names_counts: dict, prose: int = 0) -> tuple[int, Path, Path]:
    """A record holding 10 killed mutants for every module with code, and a fresh run over `names.py`."""
    modules = modules_with_code()
    rows = "\n".join(f"| `{module}.py` | 10 | 10 | 0 | 100.0 % | 0 | 0 | 100.0 % |" for module in modules)
    doc = tmp_path / "m.md"
    doc.write_text("## Old (2026-01-01)\n" + rows + "\n")
    fresh = tmp_path / "fresh.json"
    fresh.write_text(json.dumps({"modules": {"names": names_counts}, "prose_only": {"names": prose}}))
    return len(modules), doc, fresh


def test_fresh_figures_replace_the_recorded_row_of_their_module(tmp_path: Path, capsys) -> None:
    count, doc, fresh = every_module_recorded_and_one_fresh(tmp_path, {"killed": 3, "survived": 1}, prose=1)
    assert main(["--doc", str(doc), "--earlier", "Old", "--fresh", f"new={fresh}"]) == 0
    out = capsys.readouterr().out
    assert "| `names.py` | new | 4 | 3 | 1 | 75.0 % | 0 | 1 | 100.0 % |" in out
    assert f"the whole code: {10 * (count - 1) + 4:,} mutants" in out


def test_so_far_counts_a_runs_checked_mutants_and_keeps_its_unchecked_apart() -> None:
    row = fresh_rows({"modules": {"ship/core/x": {"killed": 4, "survived": 1, "unchecked": 7}}}, "today", so_far=True)["ship/core/x"]
    assert row == Figures(5, 4, 1, 0, 0, "today", 7)
    assert row.score == pytest.approx(80.0)


def test_so_far_names_the_unchecked_mutants_on_the_last_line(tmp_path: Path, capsys) -> None:
    count, doc, fresh = every_module_recorded_and_one_fresh(tmp_path, {"killed": 3, "survived": 1, "unchecked": 6})
    with pytest.raises(SystemExit, match="6 mutant"):
        main(["--doc", str(doc), "--earlier", "Old", "--fresh", f"new={fresh}"])
    capsys.readouterr()
    assert main(["--doc", str(doc), "--earlier", "Old", "--fresh", f"new={fresh}", "--so-far"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"the whole code: {10 * (count - 1) + 4:,} mutants")
    assert last.endswith("; so far: 6 mutants not checked yet are counted nowhere")
