"""The pressure step's derived mix: the requests vLLM admits together must outgrow the KV pool before any finishes.

A small simulation of vLLM's scheduler checks the bounds: requests arrive in any order within the in-flight steps,
a waiting request is admitted when its whole prompt's blocks (and the watermark) fit, first come first served, and
every running request takes a block whenever its tokens cross into one. It reports whether a running request ever
needed a block while none was free, which is when vLLM preempts.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbake.kvarith.forced_pressure import (
    ARRIVAL_STEPS, Limits, Pool, admission, final_blocks, in_flight_tokens, plan_pressure, required_max_tokens,
)
from kvbake.kvarith.planner import cdiv

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONTROL = Pool(256, 128)  # the real-serve stand-in's control preset: 64 MiB of float32 KV, blocks of 128 tokens


def preempts(pool: Pool, prompts: Sequence[int], arrivals: Sequence[int], max_tokens: int, limits: Limits = Limits()) -> bool:
    """Whether the simulated scheduler must preempt a request (see the module docstring)."""
    free, block = pool.usable, pool.block_size
    pending = sorted(range(len(prompts)), key=lambda i: (arrivals[i], i))
    waiting: list[int] = []
    running: list[dict[str, int]] = []
    step = finished = 0
    while finished < len(prompts):
        while pending and arrivals[pending[0]] <= step:
            waiting.append(pending.pop(0))
        for done in [r for r in running if r["sampled"] == max_tokens]:
            running.remove(done)
            free, finished = free + done["held"], finished + 1
        for request in running:  # one decode step: the last sampled token's KV is written
            request["slots"], request["sampled"] = request["slots"] + 1, request["sampled"] + 1
            if cdiv(request["slots"], block) > request["held"]:
                if free == 0:
                    return True
                free, request["held"] = free - 1, request["held"] + 1
        while waiting and (limits.max_running is None or len(running) < limits.max_running):
            need = cdiv(prompts[waiting[0]], block) + (limits.watermark_blocks if running else 0)
            if need > free:
                break
            prompt = prompts[waiting.pop(0)]
            free -= cdiv(prompt, block)
            running.append({"held": cdiv(prompt, block), "slots": prompt, "sampled": 1})  # the prefill samples one
        step += 1
    return False


def test_the_field_counterexample_could_fit_the_pool_and_the_derived_mix_cannot():
    # "no preemption: 40 concurrent 2144-token requests did not exceed the KV pool", on a loaded machine.
    field, staggered = [2144] * 40, [4 * index for index in range(40)]  # reaching the serve 4 steps apart
    assert not preempts(CONTROL, field, staggered, 64), "the false stop, reproduced: each 64-token answer ends too soon"
    assert in_flight_tokens(field) == 42 + 40 * ARRIVAL_STEPS == 362 > 64
    old = admission(CONTROL, field, 64, spread=362)
    assert (old.admitted, old.demand, old.forced) == (12, 180, False), "the rule never promised the old mix"
    # 2144 was the longest prompt: one of 2049 to 2113 tokens fills 17 blocks and 64 tokens never cross into an 18th
    mixed = admission(CONTROL, [2080] * 25 + [2144] * 15, 64)
    assert (mixed.admitted, mixed.demand, mixed.forced) == (15, 255, False), "even arriving together: 255 of 255"
    longer = required_max_tokens(CONTROL, field, 4096)
    assert longer == 908 and preempts(CONTROL, field, staggered, longer), "the same prompts force it with 908 tokens"

    plan = plan_pressure(CONTROL, 4096)
    assert plan is not None and (plan.requests, plan.prompt_tokens, plan.max_tokens) == (9, 3936, 124)
    prompts = [plan.prompt_tokens] * plan.requests
    spread = in_flight_tokens(prompts)
    proven = admission(CONTROL, prompts, plan.max_tokens, spread=spread)
    assert (spread, proven.admitted, proven.demand, proven.forced) == (90, 8, 256, True)
    assert proven.demand == 8 * final_blocks(3936, plan.max_tokens - spread, 128) == 8 * 32 > CONTROL.usable == 255
    for arrivals in ([0] * 9, staggered[:9], [spread - 10 * index for index in range(9)]):
        assert preempts(CONTROL, prompts, arrivals, plan.max_tokens), arrivals


@pytest.mark.parametrize(("pool", "max_model_len", "expected"), [
    (Pool(256, 128), 4096, (9, 3936, 124)),
    (Pool(512, 128), 4096, (19, 3552, 475)),
    (Pool(2048, 16), 4096, (10, 3548, 184)),
    (Pool(1000, 32), 8192, (5, 7928, 102)),
    (Pool(46604, 16), 32768, (25, 30508, 1123)),
])
def test_the_derived_mix_outgrows_the_pool_before_its_first_request_can_finish(pool, max_model_len, expected):
    plan = plan_pressure(pool, max_model_len)
    assert plan is not None and (plan.requests, plan.prompt_tokens, plan.max_tokens) == expected
    prompts = [plan.prompt_tokens] * plan.requests
    spread = in_flight_tokens(prompts)
    found = admission(pool, prompts, plan.max_tokens, spread=spread)
    assert found.demand > pool.usable and found.forced
    assert plan.requests == (pool.usable // cdiv(plan.prompt_tokens, pool.block_size)) + 1, "one request always waits"
    assert plan.prompt_tokens + plan.max_tokens <= max_model_len and plan.max_tokens > spread
    assert not admission(pool, prompts, plan.max_tokens - 1, spread=spread).forced, "the smallest max_tokens that forces"
    assert required_max_tokens(pool, prompts, max_model_len) == plan.max_tokens


def test_a_pool_that_no_request_mix_can_outgrow_within_max_model_len_has_no_plan():
    assert plan_pressure(Pool(8192, 128), 4096) is None
    assert required_max_tokens(Pool(8192, 128), [3936] * 65, 4096) is None


def test_the_scheduler_limits_shape_the_mix():
    assert plan_pressure(CONTROL, 4096, Limits(max_running=4)) is None, "4 running requests of 32 blocks fit 255"
    small = Pool(64, 128)
    capped = plan_pressure(small, 4096, Limits(max_running=2))
    assert capped is not None and (capped.requests, capped.prompt_tokens, capped.max_tokens) == (3, 3936, 64)
    assert admission(small, [3936] * 3, 64, Limits(max_running=2)).admitted == 2
    assert preempts(small, [3936] * 3, [0, 0, 0], 64, Limits(max_running=2))
    held_back = plan_pressure(CONTROL, 4096, Limits(watermark_blocks=40))
    assert held_back is not None and (held_back.requests, held_back.prompt_tokens, held_back.max_tokens) == (9, 3296, 761)
    assert held_back.requests == (255 - 40) // cdiv(held_back.prompt_tokens, 128) + 1
    slow = plan_pressure(CONTROL, 4096, Limits(step_tokens=256))
    assert slow is not None and (slow.requests, slow.max_tokens) == (10, 499), "prefilling slower needs longer answers"


@st.composite
def pools(draw: st.DrawFn) -> tuple[Pool, int, Limits]:
    block = draw(st.sampled_from([16, 32, 64, 128, 256]))
    max_model_len = draw(st.sampled_from([1024, 2048, 4096, 8192]))
    blocks = draw(st.integers(cdiv(max_model_len, block) + 2, 12 * cdiv(max_model_len, block)))
    limits = Limits(max_running=draw(st.none() | st.integers(1, 40)), watermark_blocks=draw(st.integers(0, 8)),
                    step_tokens=draw(st.sampled_from([512, 2048, 8192])))
    return Pool(blocks, block), max_model_len, limits


@PROPERTY
@given(setting=pools(), data=st.data())
def test_every_derived_mix_preempts_whatever_the_arrival_order_within_its_in_flight_steps(setting, data):
    pool, max_model_len, limits = setting
    plan = plan_pressure(pool, max_model_len, limits)
    if plan is None:
        return
    prompts = [plan.prompt_tokens] * plan.requests
    spread = in_flight_tokens(prompts, limits)
    arrivals = data.draw(st.lists(st.integers(0, spread), min_size=plan.requests, max_size=plan.requests))
    assert admission(pool, prompts, plan.max_tokens, limits, spread).forced
    assert plan.prompt_tokens + plan.max_tokens <= max_model_len
    assert preempts(pool, prompts, arrivals, plan.max_tokens, limits)


@PROPERTY
@given(setting=pools(), data=st.data())
def test_whenever_the_bound_says_forced_the_scheduler_preempts(setting, data):
    pool, _, limits = setting
    block = pool.block_size
    prompts = data.draw(st.lists(st.integers(1, 8 * block), min_size=1, max_size=40))
    spread = data.draw(st.integers(0, 64))
    max_tokens = data.draw(st.integers(spread + 1, spread + 4 * block))
    arrivals = data.draw(st.lists(st.integers(0, spread), min_size=len(prompts), max_size=len(prompts)))
    if admission(pool, prompts, max_tokens, limits, spread).forced:
        assert preempts(pool, prompts, arrivals, max_tokens, limits)
