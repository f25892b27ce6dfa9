"""Per-layer KV-cache specs of DeepSeek-V4-Flash and V4.1-Flash, as vLLM 0.33.0's layer code builds them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvbake.errors import KvArithError
from kvbake.kvarith.config import V4, V41, ModelConfig

# Spec kinds, named after vLLM's classes.
MLA = "MLAAttentionSpec"
SWA_MLA = "SlidingWindowMLASpec"
RING = "CircularBufferSpec"

DEFAULT_BLOCK_SIZE = {V4: 256, V41: 128}
V4_SWA_BLOCK = 64
V41_SWA_BLOCK = 32
FP8_DS_MLA_RECORD = 584  # 448 fp8 NoPE + 64 bf16 RoPE + 7 UE8M0 scales + 1 pad byte
FP8_DS_MLA_ALIGN = 576
MXFP8_RECORD = 528  # V4.1 record, SM100 only
MXFP8_ALIGN = 512
FP32 = 4


@dataclass(frozen=True)
class SpecOptions:
    """Serving settings that change the per-layer specs."""

    block_size: int | None = None
    sm100: bool = False
    mtp_layers: int = 0
    spec_tokens: int = 0
    indexer_fp4: bool = False
    indexer_sparse_logits: bool = False


@dataclass(frozen=True)
class LayerSpec:
    """One cache-owning layer: what vLLM's spec class computes its page from."""

    name: str
    role: str
    kind: str
    block_size: int
    content_bytes: int
    tokens_per_state: int = 1
    alignment: int | None = None
    window: int | None = None
    bounded_replay: bool = False
    stride_alignment: int = 1

    @property
    def unpadded_page_bytes(self) -> int:
        states = self.block_size // self.tokens_per_state if self.tokens_per_state > 0 else 1
        return states * self.content_bytes

    @property
    def page_bytes(self) -> int:
        raw = self.unpadded_page_bytes
        if self.alignment is None:
            return raw
        return -(-raw // self.alignment) * self.alignment

    @property
    def bucket_key(self) -> tuple[object, ...]:
        """Layers with equal keys are 'uniform type' in vLLM's sense and share a bucket."""
        if self.kind == SWA_MLA:
            return (self.kind, self.block_size, self.window, self.bounded_replay)
        return (self.kind, self.block_size)


def build_layer_specs(model: ModelConfig, options: SpecOptions) -> tuple[LayerSpec, ...]:
    """Every cache-owning layer of the model, in vLLM's registration order."""
    if options.mtp_layers < 0 or options.spec_tokens < 0:
        raise KvArithError("--mtp-layers and --spec-tokens must be >= 0", "pass a non-negative count")
    block = DEFAULT_BLOCK_SIZE[model.family] if options.block_size is None else options.block_size
    if block <= 0:
        raise KvArithError(f"block size {block} is not positive", "pass a positive --block-size")
    builder = _v4_layer if model.family == V4 else _v41_layer
    specs: list[LayerSpec] = []
    for layer in range(model.num_hidden_layers + options.mtp_layers):
        specs.extend(builder(model, options, layer, block))
    return tuple(specs)


def _v4_layer(model: ModelConfig, options: SpecOptions, layer: int, block: int) -> list[LayerSpec]:
    """DeepSeek-V4: indexer (C4 only), SWA cache, compressed KV, compressor state."""
    del options
    prefix = f"layers.{layer}"
    ratio = model.ratio(layer) if layer < model.num_hidden_layers else 0
    out: list[LayerSpec] = []
    if ratio == 4:
        index_bytes = model.index_head_dim + model.index_head_dim // 128 * 4
        out.append(LayerSpec(f"{prefix}.indexer.k_cache", "c4_indexer_k", MLA, block, index_bytes, 4, FP8_DS_MLA_ALIGN))
        out.append(_v4_state(f"{prefix}.indexer.compressor", "c4_indexer_state", 4, model.index_head_dim))
    role = "swa" if layer < model.num_hidden_layers else "mtp_swa"
    out.append(LayerSpec(f"{prefix}.swa_cache", role, SWA_MLA, V4_SWA_BLOCK, FP8_DS_MLA_RECORD, 1,
                         FP8_DS_MLA_ALIGN, model.sliding_window))
    if ratio > 1:
        out.append(LayerSpec(f"{prefix}.attn", f"c{ratio}_kv", MLA, block, FP8_DS_MLA_RECORD, ratio, FP8_DS_MLA_ALIGN))
        out.append(_v4_state(f"{prefix}.compressor", f"c{ratio}_state", ratio, model.head_dim))
    return out


def _v4_state(prefix: str, role: str, ratio: int, head_dim: int) -> LayerSpec:
    """A V4 compressor state: [kv, score] rows, two overlapping windows for ratio 4."""
    coff = 2 if ratio == 4 else 1
    state_block = 4 if ratio == 4 else 8
    content = 2 * coff * head_dim * FP32
    return LayerSpec(f"{prefix}.state_cache", role, SWA_MLA, state_block, content, 1, FP8_DS_MLA_ALIGN, coff * ratio)


def _v41_layer(model: ModelConfig, options: SpecOptions, layer: int, block: int) -> list[LayerSpec]:
    """DeepSeek-V4.1: compressed KV and indexer K on kv sources, SWA everywhere, ring on ratio-2 sources."""
    prefix = f"layers.{layer}"
    backbone = layer < model.num_hidden_layers
    ratio = model.ratio(layer)
    record = MXFP8_RECORD if options.sm100 else FP8_DS_MLA_RECORD
    align = MXFP8_ALIGN if options.sm100 else FP8_DS_MLA_ALIGN
    out: list[LayerSpec] = []
    kv_source = backbone and layer in model.kv_source_layer_ids
    if kv_source:
        out.append(LayerSpec(f"{prefix}.attn", f"r{ratio}_kv", MLA, block, record, ratio, align))
        if layer in model.index_source_layer_ids:
            out.append(_v41_indexer(model, options, prefix, ratio, block))
    swa_stride = record if options.sm100 else 1  # SM100 rows start on a record boundary
    out.append(LayerSpec(f"{prefix}.swa_cache", "swa" if backbone else "mtp_swa", SWA_MLA, V41_SWA_BLOCK, record,
                         1, align, model.sliding_window, True, swa_stride))
    if kv_source and ratio > 1:
        rows = options.spec_tokens + 2
        ring_block = max(8, 1 << (rows - 1).bit_length())
        out.append(LayerSpec(f"{prefix}.compressor.state_cache", "ring", RING, ring_block, 2 * model.head_dim * FP32))
    return out


def _v41_indexer(model: ModelConfig, options: SpecOptions, prefix: str, ratio: int, block: int) -> LayerSpec:
    dim = model.index_head_dim
    content = dim // 2 + dim // 32 if options.indexer_fp4 else dim + dim // 128 * 4
    align = MXFP8_ALIGN if options.sm100 else FP8_DS_MLA_ALIGN
    stride = math.lcm(256, 1 if options.sm100 else align) if options.indexer_sparse_logits else 1
    return LayerSpec(f"{prefix}.indexer.k_cache", f"r{ratio}_indexer_k", MLA, block, content, ratio, align,
                     stride_alignment=stride)
