"""The config.json fields of DeepSeek-V4-Flash and DeepSeek-V4.1-Flash that the arithmetic reads."""

from __future__ import annotations

from typing import Any


def v41_flash_config() -> dict[str, Any]:
    """DeepSeek-V4.1-Flash text config: 40 layers, kv sources 2/8/14/20, 3 drafter entries at the end."""
    return {
        "model_type": "deepseek_v41",
        "num_hidden_layers": 40,
        "head_dim": 512,
        "qk_rope_head_dim": 64,
        "sliding_window": 128,
        "compress_ratios": [0, 0] + [2] * 18 + [1] * 20 + [0, 0, 0],
        "kv_source_layer_ids": [2, 8, 14, 20],
        "index_source_layer_ids": [2, 8, 14, 20, 24, 28, 32, 36],
        "index_n_heads": 32,
        "index_head_dim": 128,
        "index_topk": 512,
        "num_nextn_predict_layers": 3,
        "max_position_embeddings": 1048576,
    }


def v4_flash_config() -> dict[str, Any]:
    """DeepSeek-V4-Flash text config: 43 layers, ratio 4 (with indexer) and ratio 128 alternating."""
    return {
        "model_type": "deepseek_v4",
        "num_hidden_layers": 43,
        "head_dim": 512,
        "qk_rope_head_dim": 64,
        "sliding_window": 128,
        "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0],
        "index_n_heads": 64,
        "index_head_dim": 128,
        "index_topk": 512,
        "num_nextn_predict_layers": 1,
        "max_position_embeddings": 1048576,
    }
