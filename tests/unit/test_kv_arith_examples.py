"""docs/kv_arith.md's example reports are what kv_arith prints for their command lines, byte for byte."""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

import pytest

from kvbake.kvarith.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = re.compile(r"^```\n\$ python -B scripts/kv_arith\.py (?P<args>[^\n]*)\n(?P<out>.*?)^```$", re.MULTILINE | re.DOTALL)


def examples() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "kv_arith.md").read_text(encoding="utf-8")
    return [(match["args"], match["out"]) for match in EXAMPLE.finditer(text)]


def test_the_guide_shows_a_report_of_each_kind() -> None:
    shown = "".join(out for _, out in examples())
    for line in ("Start-up: vLLM starts", "Start-up: vLLM REFUSES to start", "preemption: REQUIRED", "preemption: not required",
                 "(pool grown by MemAvailable", ": N = 46,603 (pool", "state bucket swa:"):
        assert line in shown, line
    assert any(out.count("\n") == 3 for _, out in examples()), "no pool-less --solve-tokens example"


@pytest.mark.parametrize(("args", "expected"), [pytest.param(args, out, id=f"example-{number}")
                                                for number, (args, out) in enumerate(examples(), 1)])
def test_each_example_report_is_what_the_command_prints(args: str, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    out, err = io.StringIO(), io.StringIO()
    assert main(shlex.split(args), out, err) == 0, err.getvalue()
    assert out.getvalue() == expected
