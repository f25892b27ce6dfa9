"""The calculator against every case recorded from vLLM 0.33.0's own planner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.kvarith.calculator import analyze
from kvbake.kvarith.capacity import ServeSettings, lookahead_extra_retained
from kvbake.kvarith.config import load_config
from kvbake.kvarith.specs import SpecOptions

DATA = Path(__file__).resolve().parents[1] / "data"
ORACLE = json.loads((DATA / "kv_oracle_vllm_0.33.0.json").read_text())
CONFIGS = {"deepseek_v4": DATA / "kvarith_configs" / "deepseek_v4_flash.json",
           "deepseek_v41": DATA / "kvarith_configs" / "deepseek_v41_flash.json"}


def test_oracle_is_from_vllm_0_33_0_and_large_enough() -> None:
    cases = ORACLE["cases"]
    assert ORACLE["vllm_version"] == "0.33.0"
    assert ORACLE["recorded"]
    assert len(cases) >= 48
    assert {c["model"] for c in cases} == set(CONFIGS)
    assert any(c["expect"]["refused"] for c in cases)
    assert len({c["max_model_len"] for c in cases}) >= 3


@pytest.mark.parametrize("case", ORACLE["cases"], ids=lambda c: c["id"])
def test_calculator_matches_vllm(case: dict) -> None:
    options = SpecOptions(case["block_size"], case["sm100"], case["mtp_layers"], case["spec_tokens"])
    settings = ServeSettings(case["max_model_len"], case["max_num_batched_tokens"], case["concurrent_batches"],
                             lookahead_extra_retained(case["spec_tokens"], case["mtp_layers"]))
    analysis = analyze(load_config(CONFIGS[case["model"]]), options, settings,
                       case["pool_bytes"] or (), case["num_blocks_override"])
    expect, capacity = case["expect"], analysis.capacity
    assert capacity.stride == expect["stride"]
    assert [[len(g.layers), g.bytes_per_block] for g in analysis.layout.groups] == expect["groups"]
    assert (not capacity.fits) == expect["refused"]
    if expect["refused"]:
        kind = "no available memory" if expect["refusal"] == "no_memory" else "is needed"
        assert kind in capacity.refusal
        return
    assert capacity.num_blocks == expect["num_blocks"]
    assert capacity.blocks_per_request == expect["blocks_per_request"]
    assert capacity.max_concurrency == expect["max_concurrency"]
    assert capacity.tokens == expect["tokens"]
    assert capacity.log_line == expect["log_line"]
