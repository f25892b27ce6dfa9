"""The planner on small hand-made layer lists: two page sizes, bucket names, a split that fails, gcd edges."""

from __future__ import annotations

import pytest

from kvbake.errors import KvArithError
from kvbake.kvarith.config import parse_config
from kvbake.kvarith.examples import v41_flash_config
from kvbake.kvarith.planner import (
    Bucket, _split, approximate_gcd, blocks_per_request, check_packing, make_buckets, plan_layout,
)
from kvbake.kvarith.specs import MLA, RING, SWA_MLA, LayerSpec, SpecOptions, build_layer_specs
from tests.unit.message_words import says

KV = LayerSpec("layers.0.attn", "c128_kv", MLA, 256, 584, 128, 576)
SWA = LayerSpec("layers.0.swa_cache", "swa", SWA_MLA, 64, 584, 1, 576, 128)


def test_layers_with_two_page_sizes_are_planned() -> None:
    assert KV.page_bytes != SWA.page_bytes
    layout = plan_layout([KV, SWA])
    assert [g.name for g in layout.groups] == ["mla", "swa"]
    assert layout.stride == max(KV.page_bytes, SWA.page_bytes)


def test_a_bucket_of_one_layer_is_named_by_that_layer() -> None:
    assert [b.name for b in make_buckets([SWA])] == ["swa"]


def test_buckets_sharing_a_base_name_are_numbered_from_the_second() -> None:
    wider = LayerSpec("layers.1.swa_cache", "swa", SWA_MLA, 64, 584, 1, 576, 256)
    other = LayerSpec("layers.2.swa_cache", "swa", SWA_MLA, 64, 584, 1, 576, 512)
    assert [b.name for b in make_buckets([SWA, wider, other])] == ["swa", "swa2", "swa3"]


def test_a_bucket_whose_page_sizes_have_unequal_layer_counts_cannot_be_split() -> None:
    other = LayerSpec("layers.1.attn", "c128_kv", MLA, 256, 584, 128, 576)
    small = LayerSpec("layers.2.attn", "c4_kv", MLA, 256, 584, 4, 576)
    pages = ((KV.page_bytes, (KV.name, other.name)), (small.page_bytes, (small.name,)))
    bucket = Bucket("mla", (KV, other, small), pages)
    with pytest.raises(KvArithError) as caught:
        _split(bucket, 2)
    assert says(caught.value.message, "mla")
    assert says(caught.value.fix, "vLLM 0.33.0")


def test_the_gcd_may_be_the_largest_value_and_a_value_of_one_is_allowed() -> None:
    assert approximate_gcd([7]) == 7
    assert approximate_gcd([12, 24], 5) == 12
    assert approximate_gcd([1, 2]) == 1


def test_blocks_per_request_packs_one_page_per_block_by_default() -> None:
    for spec in (KV, SWA):
        assert blocks_per_request(spec, 100_000, 4096, 0) == blocks_per_request(spec, 100_000, 4096, 0, 1)
    assert blocks_per_request(KV, 100_000, 4096, 0) == 391  # 100,000 tokens in blocks of 256


def test_a_pack_that_fills_the_stride_exactly_is_accepted() -> None:
    layout = plan_layout(build_layer_specs(parse_config(v41_flash_config()), SpecOptions()))
    widest = max(layout.groups, key=lambda g: g.bytes_per_block)
    assert widest.bytes_per_block == layout.stride
    assert check_packing(layout, {widest.name: 1}) == {widest.name: 1}


def test_a_state_whose_page_is_the_anchor_takes_one_slot_per_block() -> None:
    ring = LayerSpec("layers.0.compressor.state_cache", "ring", RING, 8, 8192)
    assert ring.page_bytes > max(KV.page_bytes, SWA.page_bytes)
    layout = plan_layout([KV, SWA, ring])
    assert dict(layout.states_per_block)["ring"] == 1
    assert layout.anchor_bytes == ring.page_bytes
