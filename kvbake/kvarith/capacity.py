"""From a layout and serving settings to N, R, the logged token count and the start-up admission check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal, InvalidOperation

from kvbake.errors import KvArithError
from kvbake.kvarith.limits import MAX_SIZE_BYTES
from kvbake.kvarith.planner import Layout, blocks_per_request, cdiv

GIB = 1 << 30
UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": GIB, "tib": 1 << 40, "pib": 1 << 50,
         "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


@dataclass(frozen=True)
class ServeSettings:
    """The serving flags that enter the arithmetic."""

    max_model_len: int
    max_num_batched_tokens: int = 2048
    concurrent_batches: int = 2
    extra_retained_tokens: int = 0

    @property
    def in_flight_tokens(self) -> int:
        return self.concurrent_batches * self.max_num_batched_tokens


@dataclass(frozen=True)
class GroupDemand:
    """One group's share of a block and of one full-length request."""

    name: str
    kind: str
    num_layers: int
    bytes_per_block: int
    blocks_per_request: int
    pack: int = 1


@dataclass(frozen=True)
class Capacity:
    """What vLLM would compute and log for this pool."""

    max_model_len: int
    stride: int
    demands: tuple[GroupDemand, ...]
    rank_blocks: tuple[int, ...]
    num_blocks: int
    refusal: str | None = None
    rank_pools: tuple[int, ...] = field(default=())

    @property
    def blocks_per_request(self) -> int:
        return sum(d.blocks_per_request for d in self.demands)

    @property
    def max_concurrency(self) -> float:
        return self.num_blocks / self.blocks_per_request

    @property
    def tokens(self) -> int:
        return int(self.max_concurrency * self.max_model_len)

    @property
    def fits(self) -> bool:
        return self.refusal is None

    @property
    def log_line(self) -> str:
        return capacity_line("GPU", self.num_blocks, self.blocks_per_request, self.max_model_len)


def capacity_line(pool: str, num_blocks: int, blocks_per_request: int, max_model_len: int) -> str:
    """vLLM's start-up line: concurrency = blocks / blocks per full-length request, tokens = int(concurrency x length)."""
    concurrency = num_blocks / blocks_per_request
    return (f"{pool} KV cache size: {int(concurrency * max_model_len):,} tokens, Maximum concurrency for "
            f"{max_model_len:,} tokens per request: {concurrency:.2f}x")


def lookahead_extra_retained(spec_tokens: int, mtp_layers: int) -> int:
    """`extra_retained_tokens` of every sliding window: num_prefill_lookahead_tokens - 1."""
    return spec_tokens - 1 if min(mtp_layers, spec_tokens) > 1 else 0


def group_demands(layout: Layout, settings: ServeSettings, packing: Mapping[str, int]) -> tuple[GroupDemand, ...]:
    """Blocks per request of every group (the scheduler uses each group's first layer spec)."""
    return tuple(
        GroupDemand(
            name=group.name,
            kind=group.first.kind,
            num_layers=len(group.layers),
            bytes_per_block=group.bytes_per_block,
            blocks_per_request=blocks_per_request(
                group.first, settings.max_model_len, settings.in_flight_tokens,
                settings.extra_retained_tokens, packing.get(group.name, 1)),
            pack=packing.get(group.name, 1),
        )
        for group in layout.groups
    )


def compute_capacity(
    layout: Layout,
    settings: ServeSettings,
    pools: Sequence[int] = (),
    num_blocks: int | None = None,
    packing: Mapping[str, int] | None = None,
) -> Capacity:
    """N = min over ranks of pool // stride (or the override), R = sum of group demands, and the admission check."""
    check_settings(settings)
    demands = group_demands(layout, settings, packing or {})
    stride = layout.stride
    if num_blocks is not None:
        if num_blocks <= 0:
            raise KvArithError(f"--num-blocks {num_blocks} is not positive", "pass a block count of 1 or more")
        pools = (num_blocks * stride,)
    if not pools:
        raise KvArithError("no pool given", "pass --pool-bytes or --num-blocks")
    for pool in pools:
        if pool <= 0:
            raise KvArithError(f"pool of {pool} bytes is not positive", "pass the per-rank KV bytes, e.g. 10GiB")
    rank_blocks = tuple(pool // stride for pool in pools)
    total = sum(d.blocks_per_request for d in demands)
    return Capacity(settings.max_model_len, stride, demands, rank_blocks, min(rank_blocks),
                    _refusal(pools, stride, total, settings.max_model_len), tuple(pools))


def _refusal(pools: Sequence[int], stride: int, total_blocks: int, max_model_len: int) -> str | None:
    """vLLM holds one null block back and needs a full-length request to fit on every rank."""
    for rank, pool in enumerate(pools):
        usable = pool - stride
        if usable <= 0:
            return f"rank {rank}: no available memory for the cache blocks ({pool:,} B is at most one block)"
        needed = stride * total_blocks
        if needed > usable:
            return (f"rank {rank}: to serve one request at max seq len {max_model_len:,}, "
                    f"{needed / GIB:.2f} GiB KV cache is needed, more than the {usable / GIB:.2f} GiB available")
    return None


def check_settings(settings: ServeSettings) -> None:
    if settings.max_model_len <= 0:
        raise KvArithError(f"max-model-len {settings.max_model_len} is not positive", "pass a positive length")
    if settings.max_num_batched_tokens <= 0 or settings.concurrent_batches <= 0:
        raise KvArithError("batched tokens and concurrent batches must be positive", "pass values >= 1")


def solve_tokens(target: int, blocks_per_req: int, max_model_len: int) -> tuple[int, ...]:
    """Every block count N for which vLLM would log exactly `target` tokens."""
    if target < 0:
        raise KvArithError(f"--solve-tokens {target} is negative", "pass the logged token count")
    low = max(1, target * blocks_per_req // max_model_len - 1)
    high = cdiv((target + 1) * blocks_per_req, max_model_len) + 1
    return tuple(n for n in range(low, high + 1) if int(n / blocks_per_req * max_model_len) == target)


def parse_bytes(text: str, option: str = "size") -> int:
    """'10GiB', '7.25 GiB', '3.49GiB' or a plain byte count, 0..1 PiB; fractions are floored to whole bytes."""
    raw = text.strip().replace("_", "")
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")
    unit = raw[len(number):].strip().lower()
    if not any(ch.isdigit() for ch in number):
        raise KvArithError(f"{option} {text!r} is not a number", "pass e.g. 10GiB or 10737418240")
    if "," in raw:
        raise KvArithError(f"{option} {text!r} has a comma", "write 4.6GiB or 4600MiB; only --pool-bytes lists ranks")
    if unit not in UNITS:
        raise KvArithError(f"{option} {text!r} has an unknown unit {unit!r}",
                           "use B, KiB, MiB, GiB, TiB, PiB, KB, MB, GB or TB")
    try:
        value = Decimal(number)
    except InvalidOperation as err:
        raise KvArithError(f"{option} {text!r} is not a number", "pass e.g. 10GiB or 10737418240") from err
    if not value.is_finite():
        raise KvArithError(f"{option} {text!r} is not finite", "pass e.g. 10GiB")
    if value < 0:
        raise KvArithError(f"{option} {text!r} is negative", "pass a size of 0 or more, e.g. 10GiB")
    if value > Decimal(MAX_SIZE_BYTES) / UNITS[unit]:
        raise KvArithError(f"{option} {text!r} is above the limit of 1 PiB ({MAX_SIZE_BYTES:,} B)",
                           "pass the per-rank size, e.g. 10GiB")
    return int((value * UNITS[unit]).to_integral_value(rounding=ROUND_FLOOR))
