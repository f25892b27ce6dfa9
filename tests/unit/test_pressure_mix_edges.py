"""The pressure mix's reading of the pool and limits at their edges, and the record of its derivation."""

from __future__ import annotations

from kvbake.kvarith.forced_pressure import DEFAULT_STEP_TOKENS, Admission, Limits, Pool
from kvbake.operate.core.pressure_mix import (
    limits_from_args, max_tokens_phrase, option_value, pool_from_args, pool_from_metrics, proof, summary_tail,
)


def gauge(blocks: str, block: str, engine: str = "0", name: str = "vllm:cache_config_info") -> str:
    return f'{name}{{block_size="{block}",engine="{engine}",num_gpu_blocks="{blocks}"}} 1.0'


def test_a_pool_needs_more_than_one_block_of_a_positive_size() -> None:
    assert pool_from_metrics(gauge("2", "16")) == Pool(2, 16)
    assert pool_from_metrics(gauge("1", "16")) is None, "the null block alone is no pool"
    assert pool_from_metrics(gauge("300", "0")) is None
    assert pool_from_metrics(gauge("300", "x")) is None


def test_the_smallest_pool_is_by_tokens_not_by_blocks() -> None:
    text = f"{gauge('100', '64', '0')}\n{gauge('300', '16', '1')}\n"
    assert pool_from_metrics(text) == Pool(300, 16), "4,800 tokens beat 6,400 though it has more blocks"


def test_only_the_cache_info_gauge_is_read_and_only_from_a_line_start() -> None:
    assert pool_from_metrics(gauge("300", "16", name="vllm:cache_config_info_other")) is None
    assert pool_from_metrics(" " + gauge("300", "16")) is None
    assert pool_from_metrics(f"# {gauge('300', '16')}\n{gauge('200', '16')}") == Pool(200, 16)


def test_an_option_without_its_value_at_the_end_is_not_read() -> None:
    assert option_value(("--block-size",), "--block-size") is None
    assert option_value(("--block-size", "16", "--block-size"), "--block-size") == "16"
    assert option_value(("--block-size-x=4",), "--block-size") is None
    assert option_value(("--block-size=a=b",), "--block-size") == "a=b"


def test_the_preset_pool_needs_both_options_whole_and_more_than_one_block() -> None:
    assert pool_from_args(("--num-gpu-blocks-override", "2", "--block-size", "16")) == Pool(2, 16)
    assert pool_from_args(("--num-gpu-blocks-override", "1", "--block-size", "16")) is None
    assert pool_from_args(("--num-gpu-blocks-override", "0", "--block-size", "16")) is None
    assert pool_from_args(("--num-gpu-blocks-override", "300", "--block-size", "0")) is None
    assert pool_from_args(("--num-gpu-blocks-override", "300")) is None
    assert pool_from_args(("--block-size", "16")) is None


def test_limits_default_to_none_no_watermark_and_vllms_step_budget() -> None:
    assert limits_from_args((), Pool(256, 16)) == Limits(None, 0, DEFAULT_STEP_TOKENS)
    assert limits_from_args(("--max-num-seqs", "0", "--max-num-batched-tokens", "0"), Pool(256, 16)) == Limits(None, 0, DEFAULT_STEP_TOKENS)


def test_the_watermark_is_a_whole_number_of_blocks_rounded_down() -> None:
    assert limits_from_args(("--watermark", "0.01"), Pool(250, 16)).watermark_blocks == 2
    assert limits_from_args(("--watermark", "-0.5"), Pool(250, 16)).watermark_blocks == 0


FOUND = Admission(usable=99, prompt_tokens=(300, 310), max_tokens=50, spread=7, admitted=2, demand=120)


def test_the_proof_records_pool_limits_and_bounds() -> None:
    record = proof(FOUND, Pool(100, 16), Limits(8, 3, 512), "the gauge")
    assert record == {"pool_blocks": 100, "block_size": 16, "usable_blocks": 99, "pool_source": "the gauge", "max_running": 8,
                      "watermark_blocks": 3, "step_tokens": 512, "requests": 2, "prompt_tokens": [300, 310], "max_tokens": 50,
                      "in_flight_steps": 7, "admitted_at_least": 2, "demand_blocks": 120, "forced": True}


def test_the_summary_names_pool_answer_length_and_demand() -> None:
    tail = summary_tail(FOUND, Pool(100, 16))
    assert tail.startswith("; derived from a pool of 100 blocks of 16 tokens: ")
    assert max_tokens_phrase(FOUND) == "50 answer tokens each (ignore_eos), in flight within 7 steps"
    assert max_tokens_phrase(FOUND) in tail and tail.endswith("at least 2 admitted together need 120 > 99 usable blocks")
