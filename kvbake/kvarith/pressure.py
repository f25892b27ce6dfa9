"""Predicts whether a request mix must force preemption in a pool bounded by the MemAvailable floor."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from kvbake.errors import KvArithError
from kvbake.kvarith.capacity import GIB, ServeSettings
from kvbake.kvarith.limits import MAX_MIX_COUNT, check_int
from kvbake.kvarith.planner import Layout, cdiv
from kvbake.kvarith.specs import RING, SWA_MLA, LayerSpec

DEFAULT_MEM_FLOOR = 3 * GIB // 2  # the supervised tests' stop condition: 1.5 GiB MemAvailable per rank


@dataclass(frozen=True)
class PressureInputs:
    """A request mix arriving together, the chunked-prefill size and the memory facts of one rank."""

    mix: tuple[tuple[int, int], ...]
    chunk_tokens: int
    pool_bytes: int
    output_tokens: int = 0
    mem_available: int | None = None
    mem_floor: int = DEFAULT_MEM_FLOOR


@dataclass(frozen=True)
class RequestDemand:
    """Blocks one request of a given prompt length holds at its peak, and what admission assumes."""

    prompt_tokens: int
    count: int
    held_blocks: int
    admission_blocks: int


@dataclass(frozen=True)
class PressureVerdict:
    """Whether the mix cannot all stay resident, so vLLM must preempt."""

    pool_for_test: int
    usable_blocks: int
    requests: tuple[RequestDemand, ...]

    @property
    def demand(self) -> int:
        return sum(r.held_blocks * r.count for r in self.requests)

    @property
    def admission_demand(self) -> int:
        return sum(r.admission_blocks * r.count for r in self.requests)

    @property
    def preemption_required(self) -> bool:
        return self.demand > self.usable_blocks

    @property
    def min_requests_to_force(self) -> int:
        """How many requests of the first prompt length alone would force preemption."""
        return self.usable_blocks // self.requests[0].held_blocks + 1


def parse_mix(text: str) -> tuple[tuple[int, int], ...]:
    """'150000x3,32000' -> ((150000, 3), (32000, 1))."""
    entries = []
    for part in text.split(","):
        length, cross, count = part.strip().lower().partition("x")
        try:
            entry = (int(length.replace("_", "")), int(count) if cross else 1)
        except ValueError as err:
            raise KvArithError(f"--mix entry {part!r} is not LENGTH[xCOUNT]", "write e.g. 150000x3,32000x2") from err
        if entry[0] <= 0 or entry[1] <= 0:
            raise KvArithError(f"--mix entry {part!r} is not positive", "use positive lengths and counts")
        check_int("--mix count", entry[1], 1, MAX_MIX_COUNT)
        entries.append(entry)
    return tuple(entries)


def window_span(end: int, held: int, block: int) -> int:
    """Blocks covered by the token range [end - held, end)."""
    start = max(0, end - held)
    return (end - 1) // block - start // block + 1


def deciding_ends(prompt: int, chunk: int, held: int, block: int) -> list[int]:
    """The chunk boundaries among which the widest window span is found.

    Below `held` tokens the span only grows with the end, so the last such boundary decides; from `held` on
    it depends on the end modulo `block` only, so one period of boundaries covers every case.
    """
    last = (prompt - 1) // chunk  # boundaries k * chunk < prompt for k = 1..last
    first_full = -(-held // chunk)
    period = block // math.gcd(chunk, block)
    steps = {min(first_full - 1, last)} | set(range(first_full, min(last, first_full + period - 1) + 1))
    return sorted(k * chunk for k in steps if k >= 1) + [prompt]


def swa_held_blocks(spec: LayerSpec, prompt: int, chunk: int, extra: int, block: int) -> int:
    """The most blocks a sliding window holds at any chunk boundary of a chunked prefill."""
    assert spec.window is not None
    held = spec.window - 1 + extra + chunk
    return max(window_span(end, min(held, end), block) for end in deciding_ends(prompt, chunk, held, block))


def request_demand(layout: Layout, settings: ServeSettings, packing: Mapping[str, int], prompt: int,
                   chunk: int, output: int) -> tuple[int, int]:
    """(held at peak, admission-cap) blocks for one request of `prompt` tokens plus `output` decoded."""
    held = admission = 0
    total = prompt + output
    for group in layout.groups:
        spec, k = group.first, packing.get(group.name, 1)
        block = spec.block_size * k
        if spec.kind == RING:
            held, admission = held + 1, admission + 1
        elif spec.kind == SWA_MLA:
            assert spec.window is not None
            extra = settings.extra_retained_tokens
            held += swa_held_blocks(spec, prompt, chunk, extra, block)
            cap = min(spec.window - 1 + extra + settings.in_flight_tokens, total)
            admission += cdiv(cap, block) + 1
        else:
            held += cdiv(total, block)
            admission += cdiv(total, block)
    return held, admission


def predict(layout: Layout, settings: ServeSettings, inputs: PressureInputs,
            packing: Mapping[str, int] | None = None) -> PressureVerdict:
    """Every request of the mix resident together: does its held demand exceed the usable blocks?"""
    if inputs.chunk_tokens <= 0:
        raise KvArithError(f"chunk size {inputs.chunk_tokens} is not positive", "pass --chunk-tokens >= 1")
    if inputs.output_tokens < 0:
        raise KvArithError("--output-tokens is negative", "pass 0 or more")
    if not inputs.mix:
        raise KvArithError("--pressure needs a request mix", "pass --mix LENGTH[xCOUNT],...")
    pool = pool_for_test(inputs.pool_bytes, inputs.mem_available, inputs.mem_floor)
    usable = pool // layout.stride - 1
    if usable <= 0:
        raise KvArithError(f"a pool of {pool:,} B holds no usable block", "raise the pool or MemAvailable")
    requests = []
    for prompt, count in inputs.mix:
        if prompt + inputs.output_tokens > settings.max_model_len:
            raise KvArithError(f"request of {prompt + inputs.output_tokens:,} tokens exceeds max-model-len",
                               "shorten the mix or raise --max-model-len")
        held, admission = request_demand(layout, settings, packing or {}, prompt, inputs.chunk_tokens,
                                         inputs.output_tokens)
        requests.append(RequestDemand(prompt, count, held, admission))
    return PressureVerdict(pool, usable, tuple(requests))


def pool_for_test(pool: int, mem_available: int | None, floor: int) -> int:
    """The largest per-rank pool that keeps MemAvailable at the floor (unified memory: pool bytes leave it)."""
    if pool <= 0:
        raise KvArithError(f"pool of {pool} bytes is not positive", "pass the per-rank KV bytes")
    if mem_available is None:
        return pool
    grown = pool + mem_available - floor
    if grown <= 0:
        raise KvArithError(
            f"MemAvailable {mem_available:,} B is {floor - mem_available:,} B below the floor {floor:,} B, "
            f"more than the whole pool of {pool:,} B",
            "check --mem-available and --mem-floor (both per rank)")
    return grown


def render_pressure(verdict: PressureVerdict, inputs: PressureInputs, stride: int) -> str:
    """The text report of a pressure prediction."""
    lines = ["", "Pressure (every request of the mix resident together):",
             f"  test pool per rank: {verdict.pool_for_test:,} B ({verdict.pool_for_test / GIB:.2f} GiB), "
             f"{verdict.usable_blocks:,} usable blocks of {stride:,} B"]
    if inputs.mem_available is not None:
        lines.append(f"  (pool grown by MemAvailable {inputs.mem_available / GIB:.2f} GiB "
                     f"down to the floor {inputs.mem_floor / GIB:.2f} GiB)")
    for r in verdict.requests:
        lines.append(f"  {r.count} x {r.prompt_tokens:,} tokens: {r.held_blocks:,} blocks held each "
                     f"(admission cap would assume {r.admission_blocks:,})")
    lines.append(f"  held demand {verdict.demand:,} vs usable {verdict.usable_blocks:,} blocks "
                 f"(admission-cap demand {verdict.admission_demand:,})")
    word = "REQUIRED" if verdict.preemption_required else "not required"
    lines.append(f"  preemption: {word}; {verdict.min_requests_to_force} requests of "
                 f"{verdict.requests[0].prompt_tokens:,} tokens alone would force it")
    return "\n".join(lines) + "\n"


def pressure_dict(verdict: PressureVerdict) -> dict[str, object]:
    return {
        "pool_for_test": verdict.pool_for_test,
        "usable_blocks": verdict.usable_blocks,
        "requests": [{"prompt_tokens": r.prompt_tokens, "count": r.count, "held_blocks": r.held_blocks,
                      "admission_blocks": r.admission_blocks} for r in verdict.requests],
        "demand": verdict.demand,
        "admission_demand": verdict.admission_demand,
        "preemption_required": verdict.preemption_required,
        "min_requests_to_force": verdict.min_requests_to_force,
    }
