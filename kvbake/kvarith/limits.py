"""The documented bounds of every kv_arith number, and the one check that enforces them."""

from __future__ import annotations

from dataclasses import dataclass

from kvbake.errors import KvArithError

MAX_SIZE_BYTES = 1 << 50  # 1 PiB: any pool, MemAvailable or floor per rank
MAX_TOKENS = 1 << 24  # 16,777,216: lengths, batch and chunk sizes, output tokens
MAX_SOLVE_TOKENS = 10**15  # a logged token count; float arithmetic stays exact below 2**53
MAX_NUM_BLOCKS = 10**9
MAX_BLOCK_SIZE = 1 << 16
MAX_SMALL_COUNT = 64  # concurrent batches, drafter layers, speculative tokens
MAX_MIX_COUNT = 1_000_000  # requests of one length in --mix
MAX_PACK = 1 << 16
MAX_CONFIG_INT = 1 << 32  # any integer field of config.json
MAX_CONFIG_LAYERS = 4096
MAX_CONFIG_BYTES = 16 << 20  # a config.json larger than 16 MiB is not a model config


@dataclass(frozen=True)
class IntBound:
    """The accepted range of one integer option."""

    option: str
    low: int
    high: int


INT_OPTIONS = (
    IntBound("--max-model-len", 1, MAX_TOKENS),
    IntBound("--num-blocks", 1, MAX_NUM_BLOCKS),
    IntBound("--block-size", 1, MAX_BLOCK_SIZE),
    IntBound("--max-num-batched-tokens", 1, MAX_TOKENS),
    IntBound("--concurrent-batches", 1, MAX_SMALL_COUNT),
    IntBound("--mtp-layers", 0, MAX_SMALL_COUNT),
    IntBound("--spec-tokens", 0, MAX_SMALL_COUNT),
    IntBound("--solve-tokens", 0, MAX_SOLVE_TOKENS),
    IntBound("--chunk-tokens", 1, MAX_TOKENS),
    IntBound("--output-tokens", 0, MAX_TOKENS),
)


def shown(value: int) -> str:
    """A number short enough for a one-line message: huge ones are named by their digit count."""
    text = str(abs(value)) if abs(value).bit_length() < 14_000 else None
    if text is not None and len(text) <= 24:
        return f"{value:,}"
    sign = "negative " if value < 0 else ""
    digits = len(text) if text is not None else f"about {int(abs(value).bit_length() * 0.30103)}"
    return f"a {sign}{digits}-digit number"


def check_int(what: str, value: int, low: int, high: int) -> int:
    """Return `value` when low <= value <= high, else refuse it naming `what` and the limit."""
    if value < low:
        raise KvArithError(f"{what} {shown(value)} is below {low:,}", f"pass {what} between {low:,} and {high:,}")
    if value > high:
        raise KvArithError(f"{what} {shown(value)} is above the limit {high:,}", f"pass {what} of at most {high:,}")
    return value
