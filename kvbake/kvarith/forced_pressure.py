"""The pressure step's requests, sized from a dense KV pool so that what vLLM admits together must outgrow it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvbake.kvarith.planner import cdiv

DEFAULT_STEP_TOKENS = 2048  # vLLM's default token budget per step (max_num_batched_tokens) of an API server on CPU
ARRIVAL_STEPS = 8  # decode steps each request may reach the serve after the one before it
PROMPT_SLACK = 4  # a target prompt leaves a quarter of its last block free: tokenizer counts may land either side


@dataclass(frozen=True)
class Pool:
    """A KV pool as vLLM reports it: its blocks (the null block included) and tokens per block."""

    blocks: int
    block_size: int

    @property
    def usable(self) -> int:
        """vLLM holds one null block back."""
        return self.blocks - 1


@dataclass(frozen=True)
class Limits:
    """Scheduler settings that bound admission: running requests, the free blocks held back, tokens per step."""

    max_running: int | None = None  # --max-num-seqs
    watermark_blocks: int = 0  # int(--watermark x blocks): kept free when a request joins a running batch
    step_tokens: int = DEFAULT_STEP_TOKENS  # --max-num-batched-tokens


@dataclass(frozen=True)
class Admission:
    """What vLLM can admit together from a set of prompts and what that set needs before the first of it finishes."""

    usable: int
    prompt_tokens: tuple[int, ...]
    max_tokens: int
    spread: int  # steps between the first request's admission and the last one's arrival
    admitted: int  # the fewest requests running once every request arrived (the next waiting one does not fit)
    demand: int  # the fewest blocks those requests hold before the first of them can finish

    @property
    def forced(self) -> bool:
        """The admitted requests cannot all finish in the pool: vLLM must preempt one."""
        return self.demand > self.usable


@dataclass(frozen=True)
class PressurePlan:
    """The derived mix: how many requests, how long each prompt should be, and the pool it is sized for."""

    pool: Pool
    requests: int
    prompt_tokens: int
    max_tokens: int


def final_blocks(prompt: int, answer: int, block: int) -> int:
    """Blocks a request holds when it samples answer token `answer`: the prompt and every answer token before it."""
    return cdiv(prompt + answer - 1, block)


def admission(pool: Pool, prompts: Sequence[int], max_tokens: int, limits: Limits = Limits(), spread: int = 0) -> Admission:
    """Lower bounds for any arrival order within `spread` steps. vLLM admits a waiting request when its whole prompt's
    blocks (and the watermark) fit and stops at the first one that does not; a running request grows by a block every
    block_size tokens. When the last request arrives, a request admitted first has decoded `spread` tokens; before it
    can finish, the one admitted last has sampled max_tokens - spread."""
    usable, block, n = pool.usable, pool.block_size, len(prompts)
    need = max(cdiv(p, block) for p in prompts)
    held = sorted(cdiv(p + spread, block) for p in prompts)  # the most each holds when the last one arrives
    reached = max_tokens - spread
    final = sorted(final_blocks(p, reached, block) for p in prompts)
    room = usable - limits.watermark_blocks
    running = n if limits.max_running is None else min(n, limits.max_running)
    if running == n and sum(held) <= room:
        return Admission(usable, tuple(prompts), max_tokens, spread, n, sum(final))
    admitted = max(0, min(cdiv(room - need + 1, held[-1]), running))
    demand = sum(final[:admitted])
    if spread == 0 and running == n:  # arriving together, only the pool stops admission: it is nearly full
        growth = sorted(final_blocks(p, reached, block) - cdiv(p, block) for p in prompts)
        demand = max(demand, room - need + 1 + sum(growth[:admitted]))
    return Admission(usable, tuple(prompts), max_tokens, spread, admitted, demand)


def in_flight_tokens(prompts: Sequence[int], limits: Limits = Limits()) -> int:
    """Steps within which every request reaches the serve and is admitted or waits: the steps the serve needs to
    prefill every prompt at its token budget, plus ARRIVAL_STEPS for each request to reach it."""
    return cdiv(sum(prompts), limits.step_tokens) + ARRIVAL_STEPS * len(prompts)


def required_max_tokens(pool: Pool, prompts: Sequence[int], max_model_len: int, limits: Limits = Limits()) -> int | None:
    """The smallest max_tokens that forces preemption whatever the arrival order within the in-flight steps and fits
    max-model-len; None if none does."""
    spread = in_flight_tokens(prompts, limits)
    low, high = spread + 1, max_model_len - max(prompts)
    if high < low or not admission(pool, prompts, high, limits, spread).forced:
        return None
    while low < high:  # the demand grows with max_tokens
        middle = (low + high) // 2
        low, high = (low, middle) if admission(pool, prompts, middle, limits, spread).forced else (middle + 1, high)
    return low


def target_prompt(blocks: int, block: int) -> int:
    """A prompt that fills `blocks` blocks with a quarter of the last one free, so a near miss stays in them."""
    return blocks * block - block // PROMPT_SLACK


def plan_pressure(pool: Pool, max_model_len: int, limits: Limits = Limits()) -> PressurePlan | None:
    """The fewest requests that force preemption: the longest prompts whose admitted set, plus one request left
    waiting, still outgrows the pool within max-model-len. None when no prompt length does."""
    block, room = pool.block_size, pool.usable - limits.watermark_blocks
    for blocks in range(cdiv(max_model_len, block), 0, -1):
        prompt = target_prompt(blocks, block)
        fit = room // blocks
        if prompt < 1 or fit < 1:
            continue
        requests = (fit if limits.max_running is None else min(fit, limits.max_running)) + 1
        answer = required_max_tokens(pool, [prompt] * requests, max_model_len, limits)
        if answer is not None:
            return PressurePlan(pool, requests, prompt, answer)
    return None


def rescaled_estimate(estimate: int, target: int, measured: Sequence[int]) -> int:
    """The estimated size of the next try, so that the longest measured prompt lands on the target."""
    return max(1, estimate * target // max(measured))


def fits_target(measured: Sequence[int], target: int, block: int) -> bool:
    """Every measured prompt fills the target's blocks and no more."""
    return max(measured) <= target and min(measured) > (cdiv(target, block) - 1) * block
