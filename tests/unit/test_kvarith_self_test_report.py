"""kv_arith --self-test: one line per anchor (ok or MISS with both values), a count, and exit 1 on any miss."""

from __future__ import annotations

import io

import pytest

from kvbake.kvarith import cli
from kvbake.kvarith.anchors import AnchorResult, run_anchors
from kvbake.kvarith.config import V4, V41, deepseek_family


def test_every_anchor_passes_and_is_counted() -> None:
    out = io.StringIO()
    assert cli.self_test(out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == len(run_anchors()) + 1
    assert all(line.startswith("ok   ") for line in lines[:-1])
    assert lines[-1] == f"{len(lines) - 1} passed, 0 failed"


def test_a_missed_anchor_shows_both_values_and_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "run_anchors", lambda: [AnchorResult("stride", 230_400, 230_400), AnchorResult("groups", 5, 6),
                                                     AnchorResult("pages", "a", "b")])
    out = io.StringIO()
    assert cli.self_test(out) == 1
    assert out.getvalue().splitlines() == ["ok   stride", "MISS groups: expected 5, got 6", "MISS pages: expected 'a', got 'b'",
                                           "1 passed, 2 failed"]


def test_main_runs_the_self_test_without_any_other_option() -> None:
    out = io.StringIO()
    assert cli.main(["--self-test"], out, io.StringIO()) == 0
    assert out.getvalue().endswith(" passed, 0 failed\n")


@pytest.mark.parametrize(("data", "family"), [
    ({"model_type": "deepseek_v4"}, V4),
    ({"model_type": "deepseek_v41"}, V41),
    ({"model_type": "deepseek_v4.1"}, V41),
    ({"model_type": "deepseek_v4", "compress_ratios": [0, 1]}, V4),
    ({"model_type": "deepseek_v41", "compress_ratios": [0, 2]}, V41),
    ({"compress_ratios": [0, 4]}, V4),
    ({"kv_source_layer_ids": [2]}, V41),
    ({"model_type": "llama"}, None),
    ({"model_type": "llama", "compress_ratios": [0, 4]}, None),
    ({}, None),
    (["deepseek_v4"], None),
])
def test_the_deepseek_family_comes_from_the_fields_or_the_model_type(data, family) -> None:
    assert deepseek_family(data) == family


def test_an_anchor_that_raises_is_a_miss_and_the_others_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvbake.kvarith import anchors

    monkeypatch.setattr(anchors, "anchor_checks", lambda: [("boom", 1, lambda: 1 // 0), ("fine", 2, lambda: 2)])
    boom, fine = anchors.run_anchors()
    assert (boom.name, boom.ok, boom.actual) == ("boom", False, "raised ZeroDivisionError: integer division or modulo by zero")
    assert (fine.name, fine.ok, fine.expected) == ("fine", True, 2)


def test_the_start_up_anchor_turns_at_one_full_request_beside_the_null_block() -> None:
    from kvbake.kvarith import anchors

    smallest = 230_400 * (3_093 + 1)  # V4.1 at 327,680 and 4,096 in flight: R = 3,093 blocks, plus the null block
    assert anchors._refused("v41", 327_680, 4_096, smallest) is False
    assert anchors._refused("v41", 327_680, 4_096, smallest - 1) is True
    assert anchors._r("v41", 327_680, 4_096) == 3_093 and anchors._r("v4", 327_680, 4_096) == 2_970


def test_the_built_in_configs_are_the_shipped_config_files() -> None:
    import json
    from pathlib import Path

    from kvbake.kvarith.examples import v4_flash_config, v41_flash_config

    folder = Path(__file__).resolve().parents[1] / "data" / "kvarith_configs"
    for name, built_in in (("deepseek_v4_flash.json", v4_flash_config()), ("deepseek_v41_flash.json", v41_flash_config())):
        shipped = json.loads((folder / name).read_text(encoding="utf-8"))
        assert shipped.get("text_config", shipped) == built_in, name
