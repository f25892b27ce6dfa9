"""The pressure mix at its smallest whole values, with a missing gauge label, and under the preset's own step budget."""

from __future__ import annotations

from test_pressure_mix_edges import gauge

from kvbake.kvarith.forced_pressure import Limits, Pool, in_flight_tokens
from kvbake.operate.core.pressure_mix import forced_admission, limits_from_args, pool_from_args, pool_from_metrics


def test_a_gauge_without_its_block_count_or_block_size_gives_no_pool() -> None:
    assert pool_from_metrics('vllm:cache_config_info{block_size="16",engine="0"} 1.0') is None
    assert pool_from_metrics('vllm:cache_config_info{engine="0",num_gpu_blocks="300"} 1.0') is None


def test_a_gauge_block_of_one_token_is_a_pool() -> None:
    assert pool_from_metrics(gauge("300", "1")) == Pool(300, 1)


def test_one_is_a_whole_option_value() -> None:
    assert pool_from_args(["--num-gpu-blocks-override", "300", "--block-size", "1"]) == Pool(300, 1)
    limits = limits_from_args(["--max-num-seqs", "1", "--max-num-batched-tokens", "1"], Pool(300, 16))
    assert (limits.max_running, limits.step_tokens) == (1, 1)


def test_the_forced_admission_spreads_arrivals_over_the_presets_step_budget() -> None:
    lengths, limits = [1000, 1000], Limits(step_tokens=100)
    found = forced_admission(Pool(300, 16), lengths, 500, limits)
    assert found.spread == in_flight_tokens(lengths, limits) != in_flight_tokens(lengths)
