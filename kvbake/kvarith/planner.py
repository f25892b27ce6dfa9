"""vLLM 0.33.0's block-outermost KV planner: buckets, groups, stride, blocks per request and capacity."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvbake.errors import KvArithError
from kvbake.kvarith.specs import MLA, RING, SWA_MLA, LayerSpec


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(value: int, multiple: int) -> int:
    return cdiv(value, multiple) * multiple


@dataclass(frozen=True)
class Bucket:
    """Layers of one uniform type, with their layer names per page size (in first-seen order)."""

    name: str
    layers: tuple[LayerSpec, ...]
    pages: tuple[tuple[int, tuple[str, ...]], ...]

    @property
    def balanced(self) -> bool:
        return len({len(names) for _, names in self.pages}) == 1

    @property
    def max_layers_per_page(self) -> int:
        return Counter(spec.page_bytes for spec in self.layers).most_common(1)[0][1]

    @property
    def first(self) -> LayerSpec:
        return self.layers[0]


@dataclass(frozen=True)
class Group:
    """One KV-cache group: its layers share one block table and one slot of each block."""

    name: str
    bucket: str
    layers: tuple[LayerSpec, ...]

    @property
    def bytes_per_block(self) -> int:
        return sum(spec.page_bytes for spec in self.layers)

    @property
    def first(self) -> LayerSpec:
        return self.layers[0]


@dataclass(frozen=True)
class Layout:
    """The grouping trace and result."""

    buckets: tuple[Bucket, ...]
    repeats_per_group: int | None
    anchor_bytes: int
    states_per_block: tuple[tuple[str, int], ...]
    groups: tuple[Group, ...]
    stride: int


def approximate_gcd(values: Sequence[int], lower_bound: int | None = None) -> int:
    """The chunk size in [lower_bound, max(values)] with the least upward padding; ties prefer the larger."""
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"values must be positive and non-empty, got {list(values)!r}")
    low = max(1, lower_bound or 1)
    best, best_pad = low, None  # a lower bound above every value is the answer itself
    for d in range(low, max(values) + 1):  # ascending, so a tie goes to the larger d
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = d, pad
    return best


def make_buckets(specs: Sequence[LayerSpec]) -> tuple[Bucket, ...]:
    """Greedy uniform-type buckets in layer order, as `_get_packed_kv_cache_groups` forms them."""
    members: dict[tuple[object, ...], list[LayerSpec]] = {}
    for spec in specs:
        members.setdefault(spec.bucket_key, []).append(spec)
    used: Counter[str] = Counter()
    buckets = []
    for layers in members.values():
        pages: dict[int, list[str]] = {}
        for spec in layers:
            pages.setdefault(spec.page_bytes, []).append(spec.name)
        base = _bucket_base_name(layers[0])
        used[base] += 1
        name = base if used[base] == 1 else f"{base}{used[base]}"
        buckets.append(Bucket(name, tuple(layers), tuple((p, tuple(n)) for p, n in pages.items())))
    return tuple(buckets)


def _bucket_base_name(spec: LayerSpec) -> str:
    if spec.kind == RING:
        return "ring"
    if spec.kind == MLA:
        return "mla"
    if spec.role.endswith("_state"):
        return spec.role.split("_")[0] + "state"
    return "swa"


def plan_layout(specs: Sequence[LayerSpec]) -> Layout:
    """Group the layers and compute the block stride."""
    if len({spec.page_bytes for spec in specs}) <= 1:
        raise KvArithError("all layers share one page size", "this calculator covers the packed DeepSeek-V4 layouts")
    buckets = make_buckets(specs)
    floor = max((b.max_layers_per_page for b in buckets if b.balanced and len(b.pages) > 1), default=0)
    repeats = approximate_gcd([b.max_layers_per_page for b in buckets if b.balanced], floor) if floor else None

    def is_state(bucket: Bucket) -> bool:
        return bucket.first.kind == RING or (repeats is None and bucket.first.kind == SWA_MLA)

    def groups_for(bucket: Bucket) -> int:
        return cdiv(bucket.max_layers_per_page, repeats) if bucket.balanced and repeats is not None else 1

    def widest(bucket: Bucket, n: int) -> int:
        return sum(cdiv(len(names), n) * page for page, names in bucket.pages)

    anchor = max(widest(b, len(b.layers) if is_state(b) else groups_for(b)) for b in buckets)
    groups: list[Group] = []
    per_block: list[tuple[str, int]] = []
    for bucket in buckets:
        count = groups_for(bucket)
        if anchor and is_state(bucket):
            states = max(anchor // bucket.first.page_bytes, 1)
            per_block.append((bucket.name, states))
            count = max(count, cdiv(len(bucket.layers), states))
        groups.extend(_split(bucket, count))
    largest = max(group.bytes_per_block for group in groups)
    stride = round_up(largest, math.lcm(*(spec.stride_alignment for spec in specs)))
    return Layout(buckets, repeats, anchor, tuple(per_block), tuple(groups), stride)


def _split(bucket: Bucket, count: int) -> list[Group]:
    if count == 1:
        return [Group(bucket.name, bucket.name, bucket.layers)]
    by_name = {spec.name: spec for spec in bucket.layers}
    repeats = list(zip(*(names for _, names in bucket.pages)))
    groups = [
        Group(f"{bucket.name}.{i}", bucket.name, tuple(by_name[n] for rep in repeats[i::count] for n in rep))
        for i in range(count)
    ]
    if sum(len(g.layers) for g in groups) != len(bucket.layers):
        raise KvArithError(
            f"bucket {bucket.name} mixes page sizes with unequal layer counts and cannot be split",
            "vLLM 0.33.0 fails its partition check for this layout",
        )
    return groups


def blocks_per_request(spec: LayerSpec, max_model_len: int, in_flight: int, extra_retained: int, pack: int = 1) -> int:
    """Blocks one request at max_model_len takes from a group whose first layer is `spec`."""
    block = spec.block_size * pack
    if spec.kind == RING:
        return 1
    if spec.kind == SWA_MLA:
        assert spec.window is not None
        held = min(spec.window - 1 + extra_retained + in_flight, max_model_len)
        return cdiv(held, block) + 1
    return cdiv(max_model_len, block)


def check_packing(layout: Layout, packing: Mapping[str, int]) -> dict[str, int]:
    """Resolve `GROUP=k` (a group or a whole bucket) to a factor per group; refuse what does not fit the stride."""
    names = {g.name for g in layout.groups} | {g.bucket for g in layout.groups}
    factors: dict[str, int] = {}
    for key, k in packing.items():
        if key not in names:
            raise KvArithError(f"unknown group {key!r} in --pack", f"use one of {', '.join(sorted(names))}")
        if k < 1:
            raise KvArithError(f"packing factor {k} for {key} is below 1", "pass k >= 1")
        for group in layout.groups:
            if key in (group.name, group.bucket):
                if k * group.bytes_per_block > layout.stride:
                    raise KvArithError(
                        f"packing {group.name} by {k} needs {k * group.bytes_per_block:,} B per block, "
                        f"more than the stride {layout.stride:,} B",
                        f"use k <= {layout.stride // group.bytes_per_block} for {group.name}",
                    )
                factors[group.name] = k
    return factors
