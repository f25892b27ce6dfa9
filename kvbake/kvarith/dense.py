"""KV-cache capacity of a dense full-attention model (Llama and kin) as vLLM 0.32/0.33 plans and logs it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbake.errors import KvArithError
from kvbake.kvarith.capacity import capacity_line
from kvbake.kvarith.config import read_config_json
from kvbake.kvarith.limits import MAX_CONFIG_INT, MAX_CONFIG_LAYERS, MAX_NUM_BLOCKS, check_int, shown

# Model types whose every layer is full attention with one KV spec (a sliding window, where a type has one, is refused).
DENSE_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "half": 2, "float": 4, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
DEVICE_LABELS = {"cuda": "GPU", "cpu": "CPU"}


@dataclass(frozen=True)
class DenseModel:
    """The config fields that size a dense model's KV cache."""

    model_type: str
    num_hidden_layers: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int


@dataclass(frozen=True)
class DenseServe:
    """The serving settings that enter the arithmetic: one rank's KV bytes (or a block override) and the block layout."""

    max_model_len: int
    block_size: int
    dtype_bytes: int
    kv_cache_bytes: int | None = None
    num_blocks_override: int | None = None
    blocks_factor: int = 1  # planned blocks multiplied by a packing switch (applied only without an override)
    tensor_parallel_size: int = 1


@dataclass(frozen=True)
class DenseCapacity:
    """What vLLM computes for one rank: blocks, per-request demand, and the capacity line it logs."""

    page_bytes: int
    bytes_per_block: int
    num_blocks: int
    blocks_per_request: int
    max_model_len: int

    @property
    def max_concurrency(self) -> float:
        return self.num_blocks / self.blocks_per_request

    @property
    def tokens(self) -> int:
        return int(self.max_concurrency * self.max_model_len)

    @property
    def fits(self) -> bool:
        """vLLM holds one null block back and refuses to start when one full-length request does not fit the rest."""
        return self.blocks_per_request <= self.num_blocks - 1

    def log_line(self, device: str = "cuda") -> str:
        return capacity_line(DEVICE_LABELS.get(device, device.upper()), self.num_blocks, self.blocks_per_request,
                             self.max_model_len)


def is_dense_config(data: Any) -> bool:
    """True when config.json names a dense model type this module covers."""
    return isinstance(data, Mapping) and str(data.get("model_type")) in DENSE_MODEL_TYPES


def parse_dense_config(data: Mapping[str, Any]) -> DenseModel:
    """The KV-relevant fields of a dense model's config.json; a sliding window is refused (not one spec per layer)."""
    model_type = str(data.get("model_type"))
    if model_type not in DENSE_MODEL_TYPES:
        raise KvArithError(f"model type {model_type!r} is not a dense full-attention type", f"pass a {', '.join(DENSE_MODEL_TYPES)} config")
    if data.get("sliding_window") is not None and data.get("use_sliding_window", model_type == "mistral"):
        raise KvArithError(f"{model_type} config uses a sliding window", "the dense arithmetic covers full attention only")
    layers = _positive(data, "num_hidden_layers", MAX_CONFIG_LAYERS)
    heads = _positive(data, "num_attention_heads")
    kv_heads = _positive(data, "num_key_value_heads") if "num_key_value_heads" in data else heads
    head_dim = _positive(data, "head_dim") if data.get("head_dim") is not None else _derived_head_dim(data, heads)
    return DenseModel(model_type, layers, kv_heads, head_dim, _positive(data, "max_position_embeddings"))


def _derived_head_dim(data: Mapping[str, Any], heads: int) -> int:
    hidden = _positive(data, "hidden_size")
    if hidden % heads:
        raise KvArithError(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}", "give head_dim in the config")
    return hidden // heads


def _positive(data: Mapping[str, Any], name: str, high: int = MAX_CONFIG_INT) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise KvArithError(f"config field '{name}' is {value!r}, not a positive integer", "use the model's full config.json")
    return check_int(f"config field '{name}'", value, 1, high)


def dtype_bytes(name: str) -> int:
    """Bytes per KV element of a vLLM dtype name."""
    if name not in DTYPE_BYTES:
        raise KvArithError(f"KV dtype {name!r} is unknown", f"use one of {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[name]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def dense_capacity(model: DenseModel, serve: DenseServe) -> DenseCapacity:
    """One group of full-attention layers: a block holds every layer's page; a request takes cdiv(L, B) blocks."""
    if model.num_key_value_heads % serve.tensor_parallel_size and serve.tensor_parallel_size % model.num_key_value_heads:
        raise KvArithError(f"{model.num_key_value_heads} KV heads do not split over tensor-parallel size {serve.tensor_parallel_size}",
                           "use a tensor-parallel size that divides the KV heads (or a multiple of them)")
    heads_per_rank = max(1, model.num_key_value_heads // serve.tensor_parallel_size)
    page = 2 * serve.block_size * heads_per_rank * model.head_dim * serve.dtype_bytes
    per_block = page * model.num_hidden_layers
    if serve.num_blocks_override is not None:
        blocks = serve.num_blocks_override
    elif serve.kv_cache_bytes is not None:
        blocks = (serve.kv_cache_bytes // per_block) * serve.blocks_factor
    else:
        raise KvArithError("no KV cache size given", "give the KV cache bytes or a block override")
    check_int("KV cache blocks", blocks, 0, MAX_NUM_BLOCKS)
    if blocks == 0:
        raise KvArithError(f"the KV cache holds no whole block of {per_block:,} bytes", f"give at least {shown(per_block)} bytes")
    return DenseCapacity(page, per_block, blocks, cdiv(serve.max_model_len, serve.block_size), serve.max_model_len)


def read_model_config(path: str | Path, option: str = "--config") -> tuple[Path, Any]:
    """The config.json a path names (the file, or the model folder holding it) and its JSON value, with a multimodal
    config's `text_config` in place of the whole."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    data = read_config_json(file, option)
    if isinstance(data, Mapping) and isinstance(data.get("text_config"), Mapping):
        data = data["text_config"]
    return file, data


def dense_model_of(file: Path, data: Any) -> DenseModel:
    """A dense model from a config's JSON value; every refusal names the file."""
    if not is_dense_config(data):
        kind = data.get("model_type") if isinstance(data, Mapping) else None
        raise KvArithError(f"config {file}: model type {kind!r} is not one of {', '.join(DENSE_MODEL_TYPES)}",
                           "pass the config.json of a dense full-attention model")
    try:
        return parse_dense_config(data)
    except KvArithError as err:
        raise KvArithError(f"config {file}: {err.message}", err.fix) from err


def load_dense_config(path: str | Path, option: str = "--config") -> DenseModel:
    """A dense model's config.json (or the model folder holding it); every refusal names the file."""
    return dense_model_of(*read_model_config(path, option))
