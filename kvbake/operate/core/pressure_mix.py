"""The pressure step's derived mix: the serve's KV pool and scheduler limits, the prompt sizes and what it proves."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kvbake.kvarith.forced_pressure import (
    DEFAULT_STEP_TOKENS, Admission, Limits, Pool, admission, fits_target, in_flight_tokens, rescaled_estimate,
)

CACHE_INFO = "vllm:cache_config_info"
_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}\s+\S+")
_LABEL = re.compile(r'(?P<name>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>[^"]*)"')
SIZING_ROUNDS = 4  # measure-and-rescale rounds that bring each prompt into its target's blocks


def pool_from_metrics(text: str) -> Pool | None:
    """The pool vLLM planned, from the labels of its vllm:cache_config_info gauge (the smallest over engines)."""
    pools = []
    for line in text.splitlines():
        match = _INFO.match(line)
        if match is None:
            continue
        labels = {m["name"]: m["value"] for m in _LABEL.finditer(match["labels"])}
        blocks, block = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
        if blocks.isdigit() and block.isdigit() and int(blocks) > 1 and int(block) > 0:
            pools.append(Pool(int(blocks), int(block)))
    return min(pools, key=lambda pool: pool.blocks * pool.block_size) if pools else None


def option_value(args: Sequence[str], name: str) -> str | None:
    """The value of `--name V` or `--name=V` in launcher arguments (the last one wins, as for argparse)."""
    value = None
    for index, arg in enumerate(args):
        if arg == name and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def _whole(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() and int(text) > 0 else None


def pool_from_args(args: Sequence[str]) -> Pool | None:
    """The pool a preset fixes by itself: --num-gpu-blocks-override with --block-size."""
    blocks, block = _whole(option_value(args, "--num-gpu-blocks-override")), _whole(option_value(args, "--block-size"))
    return Pool(blocks, block) if blocks and block and blocks > 1 else None


def limits_from_args(args: Sequence[str], pool: Pool) -> Limits:
    """The scheduler limits a preset's launcher arguments set (--max-num-seqs, --watermark, --max-num-batched-tokens)."""
    try:
        watermark = float(option_value(args, "--watermark") or 0)
    except ValueError:
        watermark = 0.0
    return Limits(max_running=_whole(option_value(args, "--max-num-seqs")),
                  watermark_blocks=max(0, int(watermark * pool.blocks)),
                  step_tokens=_whole(option_value(args, "--max-num-batched-tokens")) or DEFAULT_STEP_TOKENS)


def next_sizes(sizes: Sequence[int], measured: Sequence[int], target: int, block: int) -> tuple[int, ...] | None:
    """Each prompt's next estimated size, so its server length lands in the target's blocks; None once all do."""
    if all(fits_target([length], target, block) for length in measured):
        return None
    return tuple(size if fits_target([length], target, block) else rescaled_estimate(size, target, [length])
                 for size, length in zip(sizes, measured))


def proof(found: Admission, pool: Pool, limits: Limits, source: str) -> dict[str, Any]:
    """The report's record of why the mix must preempt: the pool, the limits and the bounds."""
    return {"pool_blocks": pool.blocks, "block_size": pool.block_size, "usable_blocks": pool.usable, "pool_source": source,
            "max_running": limits.max_running, "watermark_blocks": limits.watermark_blocks,
            "step_tokens": limits.step_tokens, "requests": len(found.prompt_tokens),
            "prompt_tokens": list(found.prompt_tokens), "max_tokens": found.max_tokens, "in_flight_steps": found.spread,
            "admitted_at_least": found.admitted, "demand_blocks": found.demand, "forced": found.forced}


def forced_admission(pool: Pool, lengths: Sequence[int], max_tokens: int, limits: Limits) -> Admission:
    """The bound the derived max_tokens was chosen by, for the measured prompts."""
    return admission(pool, lengths, max_tokens, limits, in_flight_tokens(lengths, limits))


def summary_tail(found: Admission, pool: Pool) -> str:
    """The step summary's account of the derivation."""
    return (f"; derived from a pool of {pool.blocks} blocks of {pool.block_size} tokens: {max_tokens_phrase(found)}, "
            f"at least {found.admitted} admitted together need {found.demand} > {pool.usable} usable blocks")


def max_tokens_phrase(found: Admission) -> str:
    return f"{found.max_tokens} answer tokens each (ignore_eos), in flight within {found.spread} steps"
