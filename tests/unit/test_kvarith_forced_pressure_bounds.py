"""The admission bounds and the derived mix on tiny pools, where each edge of the arithmetic decides the answer."""

from __future__ import annotations

from kvbake.kvarith.forced_pressure import (
    Admission, Limits, Pool, PressurePlan, admission, in_flight_tokens, plan_pressure, required_max_tokens,
)


def test_prompts_that_exactly_fill_the_room_are_all_admitted() -> None:
    # blocks of one token: the prompts hold 1 + 3 blocks of the 4 usable ones
    assert admission(Pool(5, 1), [1, 3], 2) == Admission(4, (1, 3), 2, 0, 2, 6)
    # one step apart: the prompts have grown to 2 + 4 blocks of the 6 usable ones
    assert admission(Pool(7, 1), [1, 3], 2, spread=1) == Admission(6, (1, 3), 2, 1, 2, 4)


def test_requests_arrive_together_unless_a_spread_is_given() -> None:
    assert admission(Pool(5, 1), [1, 3], 2).spread == 0
    assert admission(Pool(5, 1), [1, 3], 2) == admission(Pool(5, 1), [1, 3], 2, Limits(), 0)


def test_arriving_together_the_nearly_full_pool_bounds_the_demand_with_every_admitted_growth() -> None:
    # room 5, longest prompt 3 blocks: one request is admitted, and the pool held at least 5 - 3 + 1 blocks then
    assert admission(Pool(6, 1), [1, 1, 1, 3], 1) == Admission(5, (1, 1, 1, 3), 1, 0, 1, 3)
    assert admission(Pool(6, 1), [1, 1, 1, 3], 2) == Admission(5, (1, 1, 1, 3), 2, 0, 1, 4)


def test_a_prompt_longer_than_the_pool_is_never_admitted() -> None:
    verdict = admission(Pool(3, 1), [5], 2)
    assert (verdict.admitted, verdict.demand, verdict.forced) == (0, 0, False)


def test_the_search_starts_at_the_first_answer_token_after_the_in_flight_steps() -> None:
    # a pool without a usable block is outgrown by any answer: the shortest one the search allows is the answer
    spread = in_flight_tokens([16])
    assert required_max_tokens(Pool(0, 16), [16], 1000) == spread + 1
    assert required_max_tokens(Pool(0, 16), [16], 16 + spread + 1) == spread + 1
    assert required_max_tokens(Pool(0, 16), [16], 16 + spread) is None


def test_a_plan_passes_over_prompt_lengths_the_pool_cannot_hold_down_to_a_single_block() -> None:
    # one usable block of one token: only a one-token prompt fits once, so two such requests are the mix
    assert plan_pressure(Pool(2, 1), 32) == PressurePlan(Pool(2, 1), 2, 1, 19)


def test_the_running_limit_caps_the_admitted_part_of_the_mix() -> None:
    # 23 usable blocks hold four prompts of 5 blocks; two of them run, the third waits
    assert plan_pressure(Pool(24, 2), 64, Limits(max_running=2)) == PressurePlan(Pool(24, 2), 3, 10, 39)
