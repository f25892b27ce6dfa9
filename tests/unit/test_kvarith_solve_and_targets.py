"""Edges of --solve-tokens' search window and of the pressure step's prompt sizing."""

from __future__ import annotations

from kvbake.kvarith.capacity import solve_tokens
from kvbake.kvarith.forced_pressure import fits_target, rescaled_estimate


def test_one_block_can_be_the_answer() -> None:
    assert solve_tokens(1, 1, 1) == (1,)
    assert solve_tokens(105, 3_093, 327_680) == (1,)  # int(1 / 3,093 x 327,680) = 105


def test_an_exact_quotient_is_found() -> None:
    assert solve_tokens(4, 3, 6) == (2,)


def test_more_blocks_per_request_than_tokens_find_every_block_count() -> None:
    assert solve_tokens(0, 2, 1) == (1,)
    assert solve_tokens(3, 10, 3) == (10, 11, 12, 13)


def test_the_last_block_count_that_rounds_down_to_the_target_is_found() -> None:
    assert solve_tokens(62, 5, 45) == (7,)  # 7 / 5 x 45 is 62.99999999999999 in floating point, as vLLM computes it


def test_the_largest_documented_count_is_solved_without_scanning_from_one() -> None:
    assert solve_tokens(10**15, 3_093, 327_680) == ()


def test_a_prompt_fits_its_target_when_it_fills_the_target_s_last_block_and_no_more() -> None:
    assert fits_target([897, 1000], 1000, 128) is True
    assert fits_target([896, 1000], 1000, 128) is False
    assert fits_target([900, 1001], 1000, 128) is False


def test_a_rescaled_estimate_is_at_least_one() -> None:
    assert rescaled_estimate(1, 1, [1000]) == 1
    assert rescaled_estimate(1000, 500, [250, 400]) == 1250
