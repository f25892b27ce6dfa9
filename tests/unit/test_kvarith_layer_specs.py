"""Every field of the per-layer KV specs, drafter (MTP) layers and each serving option included, layer by layer."""

from __future__ import annotations

from kvbake.kvarith.config import parse_config
from kvbake.kvarith.specs import MLA, RING, SWA_MLA, LayerSpec, SpecOptions, build_layer_specs
from tests.unit.test_kv_arith import V4_CONFIG, V41_CONFIG

FIELDS = ("name", "role", "kind", "block_size", "content_bytes", "tokens_per_state", "alignment", "window",
          "bounded_replay", "stride_alignment")


def fields(spec: LayerSpec) -> tuple[object, ...]:
    return tuple(getattr(spec, name) for name in FIELDS)


def of_layer(specs: tuple[LayerSpec, ...], layer: int) -> list[tuple[object, ...]]:
    return [fields(spec) for spec in specs if spec.name.startswith(f"layers.{layer}.")]


# a V4 config whose list also gives the drafter layer a ratio: the drafter must stay sliding-window only
V4_DRAFTER_RATIO = {**V4_CONFIG, "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 4]}


def test_a_v4_c4_layer_a_c128_layer_and_its_drafter_layer() -> None:
    specs = build_layer_specs(parse_config(V4_DRAFTER_RATIO), SpecOptions(mtp_layers=1))
    assert of_layer(specs, 2) == [
        ("layers.2.indexer.k_cache", "c4_indexer_k", MLA, 256, 132, 4, 576, None, False, 1),
        ("layers.2.indexer.compressor.state_cache", "c4_indexer_state", SWA_MLA, 4, 2048, 1, 576, 8, False, 1),
        ("layers.2.swa_cache", "swa", SWA_MLA, 64, 584, 1, 576, 128, False, 1),
        ("layers.2.attn", "c4_kv", MLA, 256, 584, 4, 576, None, False, 1),
        ("layers.2.compressor.state_cache", "c4_state", SWA_MLA, 4, 8192, 1, 576, 8, False, 1),
    ]
    assert of_layer(specs, 3) == [
        ("layers.3.swa_cache", "swa", SWA_MLA, 64, 584, 1, 576, 128, False, 1),
        ("layers.3.attn", "c128_kv", MLA, 256, 584, 128, 576, None, False, 1),
        ("layers.3.compressor.state_cache", "c128_state", SWA_MLA, 8, 4096, 1, 576, 128, False, 1),
    ]
    assert of_layer(specs, 43) == [("layers.43.swa_cache", "mtp_swa", SWA_MLA, 64, 584, 1, 576, 128, False, 1)]
    assert len(specs) == len(build_layer_specs(parse_config(V4_DRAFTER_RATIO), SpecOptions())) + 1


def test_a_v41_source_layer_and_its_drafter_layer_on_sm100_with_the_fp4_sparse_indexer() -> None:
    options = SpecOptions(sm100=True, mtp_layers=1, spec_tokens=6, indexer_fp4=True, indexer_sparse_logits=True)
    specs = build_layer_specs(parse_config(V41_CONFIG), options)
    assert of_layer(specs, 2) == [
        ("layers.2.attn", "r2_kv", MLA, 128, 528, 2, 512, None, False, 1),
        ("layers.2.indexer.k_cache", "r2_indexer_k", MLA, 128, 68, 2, 512, None, False, 256),
        ("layers.2.swa_cache", "swa", SWA_MLA, 32, 528, 1, 512, 128, True, 528),
        ("layers.2.compressor.state_cache", "ring", RING, 8, 4096, 1, None, None, False, 1),
    ]
    assert of_layer(specs, 40) == [("layers.40.swa_cache", "mtp_swa", SWA_MLA, 32, 528, 1, 512, 128, True, 528)]


def test_a_v41_source_layer_with_the_fp8_sparse_indexer_and_more_speculative_rows() -> None:
    options = SpecOptions(spec_tokens=7, indexer_sparse_logits=True)
    layer = of_layer(build_layer_specs(parse_config(V41_CONFIG), options), 8)
    assert layer == [
        ("layers.8.attn", "r2_kv", MLA, 128, 584, 2, 576, None, False, 1),
        ("layers.8.indexer.k_cache", "r2_indexer_k", MLA, 128, 132, 2, 576, None, False, 2304),
        ("layers.8.swa_cache", "swa", SWA_MLA, 32, 584, 1, 576, 128, True, 1),
        ("layers.8.compressor.state_cache", "ring", RING, 16, 4096, 1, None, None, False, 1),
    ]


def test_the_ring_holds_the_speculative_rows_rounded_up_to_a_power_of_two_of_at_least_eight() -> None:
    def ring_block(spec_tokens: int) -> int:
        specs = build_layer_specs(parse_config(V41_CONFIG), SpecOptions(spec_tokens=spec_tokens))
        return next(spec.block_size for spec in specs if spec.role == "ring")

    assert [ring_block(n) for n in (0, 6, 7, 14, 15)] == [8, 8, 16, 16, 32]
