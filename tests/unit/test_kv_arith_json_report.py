"""kv_arith --json: every field of the report, of a pool-less solution and of the pressure prediction, with its value."""

from __future__ import annotations

import io
import json
from pathlib import Path

from kvbake.kvarith.cli import main

ROOT = Path(__file__).resolve().parents[2]
V41 = str(ROOT / "tests" / "data" / "kvarith_configs" / "deepseek_v41_flash.json")


def report(*argv: str) -> dict:
    out, err = io.StringIO(), io.StringIO()
    assert main(["--config", V41, "--max-model-len", "327680", "--json", *argv], out, err) == 0, err.getvalue()
    return json.loads(out.getvalue())


def test_the_analysis_report_has_every_field() -> None:
    data = report("--pool-bytes", "10GiB", "--solve-tokens", "4937236", "--spec-tokens", "3", "--mtp-layers", "2")
    assert (data["model"], data["family"], data["max_model_len"], data["in_flight_tokens"], data["extra_retained_tokens"]) == (
        "DeepSeek-V4.1-Flash", "deepseek_v41", 327_680, 4_096, 2)
    assert data["specs"][0] == {"role": "swa", "class": "SlidingWindowMLASpec", "block_size": 32, "content_bytes": 584,
                                "tokens_per_state": 1, "alignment": 576, "window": 128, "stride_alignment": 1, "page_bytes": 19_008,
                                "unpadded_page_bytes": 18_688, "layers": 40}
    assert [row["role"] for row in data["specs"]][-1] == "mtp_swa" and data["specs"][-1]["layers"] == 2
    grouping = data["grouping"]
    assert grouping["buckets"][0] == {"name": "swa", "class": "SlidingWindowMLASpec", "block_size": 32, "layers": 42,
                                      "pages": [{"page_bytes": 19_008, "layers": 42}], "balanced": True}
    assert set(grouping) == {"buckets", "repeats_per_group", "anchor_bytes", "states_per_block", "stride"}
    assert grouping["repeats_per_group"] is None and grouping["stride"] == 230_400 and grouping["anchor_bytes"] > 0
    assert set(grouping["states_per_block"]) == {"swa", "ring"}
    assert set(data["groups"][0]) == {"name", "class", "layers", "bytes_per_block", "blocks_per_request", "pack"}
    assert data["groups"][0]["name"] == "swa.0" and data["groups"][0]["pack"] == 1
    assert (data["stride"], data["rank_pool_bytes"], data["rank_blocks"], data["num_blocks"]) == (230_400, [10 << 30], [46_603], 46_603)
    assert data["tokens"] == int(data["max_concurrency"] * 327_680) and data["fits"] is True and data["refusal"] is None
    assert data["log_line"].startswith("GPU KV cache size: ")
    assert data["blocks_per_request"] == sum(g["blocks_per_request"] for g in data["groups"])
    assert "pressure" not in data


def test_the_solution_of_a_token_count_lists_each_block_count_and_its_pool_range() -> None:
    data = report("--pool-bytes", "10GiB", "--solve-tokens", "4937236")
    assert data["solve_tokens"] == {"target": 4_937_236, "num_blocks": [46_603],
                                    "pool_bytes_ranges": [[46_603 * 230_400, 46_604 * 230_400 - 1]]}
    assert "solve_tokens" not in report("--pool-bytes", "10GiB")


def test_a_pool_less_solution_has_its_own_fields() -> None:
    data = report("--solve-tokens", "4937236")
    assert data == {"model": "DeepSeek-V4.1-Flash", "family": "deepseek_v41", "max_model_len": 327_680, "in_flight_tokens": 4_096,
                    "stride": 230_400, "blocks_per_request": 3_093,
                    "solve_tokens": {"target": 4_937_236, "num_blocks": [46_603],
                                     "pool_bytes_ranges": [[46_603 * 230_400, 46_604 * 230_400 - 1]]}}


def test_the_pressure_prediction_has_every_field() -> None:
    pressure = report("--pool-bytes", "10GiB", "--pressure", "--mix", "1000,2000x2")["pressure"]
    assert set(pressure) == {"pool_for_test", "usable_blocks", "requests", "demand", "admission_demand", "preemption_required",
                             "min_requests_to_force"}
    assert pressure["requests"][1]["prompt_tokens"] == 2_000 and pressure["requests"][1]["count"] == 2
    assert set(pressure["requests"][0]) == {"prompt_tokens", "count", "held_blocks", "admission_blocks"}
    assert pressure["demand"] == sum(r["held_blocks"] * r["count"] for r in pressure["requests"])
    assert pressure["admission_demand"] == sum(r["admission_blocks"] * r["count"] for r in pressure["requests"])
    assert pressure["usable_blocks"] == 46_602 and pressure["preemption_required"] is False
    assert pressure["min_requests_to_force"] == 46_602 // pressure["requests"][0]["held_blocks"] + 1
