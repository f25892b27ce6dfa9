"""Reads a DeepSeek-V4 / V4.1 config.json into the few fields the KV arithmetic needs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbake.errors import KvArithError
from kvbake.kvarith.limits import MAX_CONFIG_BYTES, MAX_CONFIG_INT, MAX_CONFIG_LAYERS, check_int, shown

V4 = "deepseek_v4"
V41 = "deepseek_v41"
FAMILY_TITLES = {V4: "DeepSeek-V4-Flash", V41: "DeepSeek-V4.1-Flash"}
ALLOWED_RATIOS = {V4: (0, 4, 128), V41: (0, 1, 2)}
# vLLM 0.33.0's DeepSeek-V4 backends hard-code the 512-dim latent with a 64-dim RoPE part.
SUPPORTED_HEAD_DIM = 512
SUPPORTED_ROPE_DIM = 64
KNOWN_MODEL_TYPES = ("deepseek_v4", "deepseek_v41", "deepseek_v4_1", "deepseek_v4.1")


@dataclass(frozen=True)
class ModelConfig:
    """The config fields that decide the KV-cache layout."""

    family: str
    num_hidden_layers: int
    head_dim: int
    qk_rope_head_dim: int
    sliding_window: int
    compress_ratios: tuple[int, ...]
    index_head_dim: int
    max_position_embeddings: int
    num_nextn_predict_layers: int = 0
    kv_source_layer_ids: tuple[int, ...] = ()
    index_source_layer_ids: tuple[int, ...] = ()

    @property
    def title(self) -> str:
        return FAMILY_TITLES[self.family]

    def ratio(self, layer: int) -> int:
        """The compress ratio of a layer; layers past the list (drafter layers) are sliding-window only."""
        return self.compress_ratios[layer] if layer < len(self.compress_ratios) else 0


def load_config(path: str | Path) -> ModelConfig:
    """Read and parse a config.json file; every refusal names the file."""
    file = Path(path)
    data = read_config_json(file)
    try:
        return parse_config(data)
    except KvArithError as err:
        raise KvArithError(f"config {file}: {err.message}", err.fix) from err


def read_config_json(file: Path, option: str = "--config") -> Any:
    """The JSON value of a UTF-8 file of at most MAX_CONFIG_BYTES; the fixes name the option that gave the file."""
    fix = f"pass the model's config.json with {option}"
    try:
        if file.is_dir():
            raise KvArithError(f"config {file} is a directory", "pass the config.json file inside it")
        if file.exists() and not file.is_file():
            raise KvArithError(f"config {file} is not a regular file", fix)
        with file.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError as err:
        raise KvArithError(f"config {file} does not exist", fix) from err
    except OSError as err:
        raise KvArithError(f"config {file} cannot be read: {err.strerror}", "check the path and permissions") from err
    except ValueError as err:  # a NUL byte in the path
        raise KvArithError(f"config path {str(file)!r} is not a valid path ({err})", fix) from err
    if len(raw) > MAX_CONFIG_BYTES:
        raise KvArithError(f"config {file} is larger than {MAX_CONFIG_BYTES >> 20} MiB", fix)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise KvArithError(f"config {file} is not UTF-8 text (byte {err.start}: {err.reason})", fix) from err
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise KvArithError(f"config {file} is not JSON (line {err.lineno}: {err.msg})", fix) from err
    except (ValueError, RecursionError) as err:  # over-long integers, over-deep nesting
        raise KvArithError(f"config {file} is not usable JSON ({type(err).__name__})", fix) from err


def parse_config(data: Any) -> ModelConfig:
    """Parse config.json content; a `text_config` wrapper is unwrapped."""
    if not isinstance(data, Mapping):
        raise KvArithError("config is not a JSON object", "pass the model's config.json")
    if isinstance(data.get("text_config"), Mapping):
        data = data["text_config"]
    family = detect_family(data)
    config = ModelConfig(
        family=family,
        num_hidden_layers=_positive_int(data, "num_hidden_layers", MAX_CONFIG_LAYERS),
        head_dim=_positive_int(data, "head_dim"),
        qk_rope_head_dim=_positive_int(data, "qk_rope_head_dim"),
        sliding_window=_positive_int(data, "sliding_window"),
        compress_ratios=_int_list(data, "compress_ratios"),
        index_head_dim=_positive_int(data, "index_head_dim"),
        max_position_embeddings=_positive_int(data, "max_position_embeddings"),
        num_nextn_predict_layers=_optional_int(data, "num_nextn_predict_layers"),
        kv_source_layer_ids=_int_list(data, "kv_source_layer_ids") if family == V41 else (),
        index_source_layer_ids=_int_list(data, "index_source_layer_ids") if family == V41 else (),
    )
    check_consistency(config)
    return config


def detect_family(data: Mapping[str, Any]) -> str:
    """V4.1 is recognised by its kv-source list, V4 by its compress ratios."""
    model_type = data.get("model_type")
    if model_type is not None and str(model_type) not in KNOWN_MODEL_TYPES:
        raise KvArithError(
            f"unknown model type {_shown(model_type)}",
            "kv_arith covers DeepSeek-V4-Flash and DeepSeek-V4.1-Flash configs only",
        )
    if "kv_source_layer_ids" in data or "index_source_layer_ids" in data:
        return V41
    if "compress_ratios" in data:
        ratios = data["compress_ratios"]
        if isinstance(ratios, list) and any(r in (1, 2) for r in ratios):
            raise KvArithError(
                "config has ratio-1/2 compress_ratios but no field 'kv_source_layer_ids'",
                "add kv_source_layer_ids and index_source_layer_ids from the DeepSeek-V4.1 config",
            )
        return V4
    raise KvArithError(
        f"unknown model type {_shown(model_type)}: the config has neither 'compress_ratios' nor 'kv_source_layer_ids'",
        "pass a DeepSeek-V4-Flash or DeepSeek-V4.1-Flash config.json",
    )


def deepseek_family(data: Any) -> str | None:
    """The DeepSeek family (V4 or V4.1) a config.json's value belongs to, by its fields or its model type; None for
    any other model."""
    if not isinstance(data, Mapping):
        return None
    try:
        return detect_family(data)
    except KvArithError:
        model_type = str(data.get("model_type"))
        return None if model_type not in KNOWN_MODEL_TYPES else V4 if model_type == V4 else V41


def check_consistency(config: ModelConfig) -> None:
    """Reject layer lists that contradict each other or the supported record format."""
    if config.head_dim != SUPPORTED_HEAD_DIM:
        raise KvArithError(f"field 'head_dim' is {config.head_dim}", "vLLM's DeepSeek-V4 cache needs head_dim 512")
    if config.qk_rope_head_dim != SUPPORTED_ROPE_DIM:
        raise KvArithError(
            f"field 'qk_rope_head_dim' is {config.qk_rope_head_dim}", "vLLM's DeepSeek-V4 record needs 64"
        )
    if len(config.compress_ratios) < config.num_hidden_layers:
        raise KvArithError(
            f"field 'compress_ratios' has {len(config.compress_ratios)} entries "
            f"but num_hidden_layers is {config.num_hidden_layers}",
            "give one compress ratio per layer",
        )
    allowed = ALLOWED_RATIOS[config.family]
    for layer, ratio in enumerate(config.compress_ratios):
        if ratio not in allowed:
            raise KvArithError(
                f"field 'compress_ratios' has {shown(ratio)} at layer {layer}; {config.title} allows {allowed}",
                "check that the config belongs to this model",
            )
    if config.family == V41:
        _check_v41_sources(config)


def _check_v41_sources(config: ModelConfig) -> None:
    layers = config.num_hidden_layers
    for field, ids in (("kv_source_layer_ids", config.kv_source_layer_ids),
                       ("index_source_layer_ids", config.index_source_layer_ids)):
        if not ids:
            raise KvArithError(f"field '{field}' is empty", "copy it from the model's config.json")
        if len(set(ids)) != len(ids):
            raise KvArithError(f"field '{field}' lists a layer twice", "list each layer once")
        for layer in ids:
            if not 0 <= layer < layers:
                raise KvArithError(
                    f"field '{field}' lists layer {shown(layer)} outside 0..{layers - 1}", "fix the layer list"
                )
            if config.ratio(layer) == 0:
                raise KvArithError(
                    f"field '{field}' lists layer {layer}, whose compress_ratios entry is 0",
                    "a source layer must be a compressed layer",
                )
    compressed = [layer for layer in range(layers) if config.ratio(layer) > 0]
    first_source = min(config.kv_source_layer_ids)
    if compressed and compressed[0] < first_source:
        raise KvArithError(
            f"field 'kv_source_layer_ids' starts at {first_source} but layer {compressed[0]} is compressed",
            "every compressed layer needs a kv source at or below it",
        )


def _field(data: Mapping[str, Any], name: str) -> Any:
    if name not in data:
        raise KvArithError(f"config lacks field '{name}'", "use the model's full config.json")
    return data[name]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(data: Mapping[str, Any], name: str, high: int = MAX_CONFIG_INT) -> int:
    value = _field(data, name)
    if not _is_int(value) or value <= 0:
        raise KvArithError(f"field '{name}' is {_shown(value)}, not a positive integer", "fix the config value")
    return check_int(f"field '{name}'", value, 1, high)


def _optional_int(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name, 0)
    if not _is_int(value) or value < 0:
        raise KvArithError(f"field '{name}' is {_shown(value)}, not a non-negative integer", "fix the config value")
    return check_int(f"field '{name}'", value, 0, MAX_CONFIG_INT)


def _int_list(data: Mapping[str, Any], name: str) -> tuple[int, ...]:
    value = _field(data, name)
    if not isinstance(value, list) or not all(_is_int(v) for v in value):
        raise KvArithError(f"field '{name}' is not a list of integers", "fix the config value")
    if len(value) > MAX_CONFIG_LAYERS + MAX_CONFIG_LAYERS:
        raise KvArithError(f"field '{name}' has {len(value):,} entries",
                           f"a model has at most {MAX_CONFIG_LAYERS:,} layers")
    return tuple(value)


def _shown(value: Any) -> str:
    """A config value short enough for a one-line message."""
    if _is_int(value):
        return shown(value)
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
