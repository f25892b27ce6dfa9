"""The KV capacity line a preset should make the serve log, from the model config and the preset; and a log's check."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvbake.errors import KvArithError, ValidationStop
from kvbake.kvarith.config import FAMILY_TITLES
from kvbake.kvarith.dense import DENSE_MODEL_TYPES, DenseCapacity, DenseModel, DenseServe, dense_capacity, dtype_bytes
from kvbake.manifest import Manifest, Preset

LOG_LINE = re.compile(r"(?P<device>[A-Z]+(?: \+ host)?) KV cache size: (?P<tokens>[0-9,]+) tokens, Maximum concurrency for "
                      r"(?P<length>[0-9,]+) tokens per request: (?P<concurrency>[0-9.]+)x")
# The vLLM options that enter the arithmetic, as the preset's launcher_args may spell them.
OPTIONS = ("--block-size", "--kv-cache-memory-bytes", "--num-gpu-blocks-override", "--dtype", "--kv-cache-dtype",
           "--tensor-parallel-size")
ALIASES = {"-tp": "--tensor-parallel-size"}


@dataclass(frozen=True)
class Prediction:
    """The capacity one preset gives on one rank, and the switch that scales it (if any)."""

    preset: str
    capacity: DenseCapacity
    blocks_factor: int
    device: str

    @property
    def line(self) -> str:
        return self.capacity.log_line(self.device)


@dataclass(frozen=True)
class LoggedCapacity:
    """The capacity line one rank's serve logged."""

    device: str
    tokens: int
    max_model_len: int
    concurrency: str

    @property
    def line(self) -> str:
        return (f"{self.device} KV cache size: {self.tokens:,} tokens, Maximum concurrency for {self.max_model_len:,} "
                f"tokens per request: {self.concurrency}x")


def launcher_options(args: Sequence[str]) -> dict[str, str]:
    """The arithmetic's options from vLLM arguments: `--opt value`, `--opt=value`, underscores or the short -tp."""
    found: dict[str, str] = {}
    for index, token in enumerate(args):
        name, equals, value = token.partition("=")
        name = ALIASES.get(name, "--" + name[2:].replace("_", "-") if name.startswith("--") else name)
        if name in OPTIONS:
            found[name] = value if equals else (args[index + 1] if index + 1 < len(args) else "")
    return found


def _whole(option: str, text: str, preset: str) -> int:
    if not re.fullmatch(r"[0-9]{1,18}", text) or int(text) == 0:
        raise KvArithError(f"preset {preset}: {option} {text!r} is not a positive whole number",
                           f"write {option} as a whole number in the preset's launcher_args (bytes for --kv-cache-memory-bytes)")
    return int(text)


def blocks_factor(manifest: Manifest, preset: Preset) -> int:
    """The product of the preset's kv_blocks_factor switch values (1 when it sets none)."""
    factor = 1
    for name, value in preset.switches.items():
        switch = manifest.switches.get(name)
        if switch is not None and switch.effect == "kv_blocks_factor":
            factor *= int(value)
    return factor


def serve_settings(manifest: Manifest, preset: Preset) -> DenseServe:
    """The preset's settings for the arithmetic; a preset that leaves the KV size to vLLM's profiling cannot be predicted."""
    options = launcher_options(preset.launcher_args)
    name = preset.name
    if "--block-size" not in options:
        raise KvArithError(f"preset {name} gives no --block-size", "add --block-size to its launcher_args to predict its capacity")
    if "--kv-cache-memory-bytes" not in options and "--num-gpu-blocks-override" not in options:
        raise KvArithError(f"preset {name} leaves the KV cache size to vLLM's memory profiling",
                           "give --kv-cache-memory-bytes or --num-gpu-blocks-override in its launcher_args to predict its capacity")
    dtype = options.get("--kv-cache-dtype", "auto")
    if dtype == "auto":
        dtype = options.get("--dtype", "auto")
    if dtype == "auto":
        raise KvArithError(f"preset {name} leaves the KV dtype to the platform's default",
                           "give --dtype (or --kv-cache-dtype) in its launcher_args to predict its capacity")
    memory = options.get("--kv-cache-memory-bytes")
    override = options.get("--num-gpu-blocks-override")
    return DenseServe(
        max_model_len=preset.max_model_len, block_size=_whole("--block-size", options["--block-size"], name),
        dtype_bytes=dtype_bytes(dtype), kv_cache_bytes=_whole("--kv-cache-memory-bytes", memory, name) if memory else None,
        num_blocks_override=_whole("--num-gpu-blocks-override", override, name) if override else None,
        blocks_factor=blocks_factor(manifest, preset),
        tensor_parallel_size=_whole("--tensor-parallel-size", options.get("--tensor-parallel-size", "1"), name))


def kv_arith_command(config: str, preset: Preset) -> str:
    """The scripts/kv_arith.py command line for a DeepSeek-V4/V4.1 config and the preset's settings; POOL stands for
    a KV size the preset leaves to vLLM's profiling."""
    options = launcher_options(preset.launcher_args)
    argv = ["python", "-B", "scripts/kv_arith.py", "--config", config, "--max-model-len", str(preset.max_model_len)]
    if "--block-size" in options:
        argv += ["--block-size", options["--block-size"]]
    if "--kv-cache-memory-bytes" in options:
        argv += ["--pool-bytes", options["--kv-cache-memory-bytes"]]
    elif "--num-gpu-blocks-override" in options:
        argv += ["--num-blocks", options["--num-gpu-blocks-override"]]
    else:
        argv += ["--pool-bytes", "POOL"]
    return shlex.join(argv)


def deepseek_refusal(config: str, model_type: object, family: str, preset: Preset) -> KvArithError:
    """Why capacity refuses a DeepSeek-V4/V4.1 config, with the kv_arith command that does its arithmetic."""
    command = kv_arith_command(config, preset)
    where = "POOL: the KV cache bytes of one rank, e.g. 10GiB; docs/kv_arith.md" if command.endswith(" POOL") else "docs/kv_arith.md"
    return KvArithError(f"config {config}: model type {model_type!r} is a {FAMILY_TITLES[family]} config, which capacity cannot "
                        f"predict (dense full-attention models only: {', '.join(DENSE_MODEL_TYPES)})",
                        f"scripts/kv_arith.py does its arithmetic: run {command} ({where})")


def predict(manifest: Manifest, preset: Preset, model: DenseModel, device: str) -> Prediction:
    """The capacity line of one preset; a preset longer than the model's context is refused."""
    if preset.max_model_len > model.max_position_embeddings:
        raise KvArithError(f"preset {preset.name}: max_model_len {preset.max_model_len:,} is above the model's "
                           f"max_position_embeddings {model.max_position_embeddings:,}",
                           f"lower the preset's max_model_len to at most {model.max_position_embeddings:,}")
    settings = serve_settings(manifest, preset)
    return Prediction(preset.name, dense_capacity(model, settings), settings.blocks_factor, device)


def parse_logged(log: str) -> LoggedCapacity | None:
    """The last capacity line in a serve's log, or None."""
    matches = list(LOG_LINE.finditer(log))
    if not matches:
        return None
    m = matches[-1]
    return LoggedCapacity(m["device"].strip(), int(m["tokens"].replace(",", "")), int(m["length"].replace(",", "")),
                          m["concurrency"])


def agrees(prediction: Prediction, logged: LoggedCapacity) -> bool:
    """Tokens, length and concurrency as vLLM prints them (the device word is the platform's)."""
    cap = prediction.capacity
    return (logged.tokens, logged.max_model_len, logged.concurrency) == (cap.tokens, cap.max_model_len, f"{cap.max_concurrency:.2f}")


def check_ranks(prediction: Prediction, logs: Mapping[str, str], head: str | None = None) -> list[str]:
    """One line per rank ("node: logged line"); a rank without the line or with another one stops, naming every rank.
    With `head` (more than one node: real multi-node vLLM logs the KV cache size on the head only), a worker without
    the line is reported as such, and the head must log it."""
    lines, problems = [], []
    for node, log in logs.items():
        logged = parse_logged(log)
        if logged is None and head is not None and node != head:
            lines.append(f"{node}: no KV cache size line (a worker: multi-node vLLM logs it on the head only)")
        elif logged is None:
            problems.append(f"{node} logged no KV cache size line")
        elif not agrees(prediction, logged):
            problems.append(f"{node} logged {logged.line!r}")
        else:
            lines.append(f"{node}: {logged.line}")
    if problems:
        raise ValidationStop(f"KV capacity of preset {prediction.preset} differs from the prediction {prediction.line!r}: "
                             f"{'; '.join(problems)}",
                             "check that every rank runs the release and preset (verify-running), then the switch's patch; "
                             "a rank without the line has not finished starting or its log was rotated")
    return lines


def prediction_dict(prediction: Prediction) -> dict[str, Any]:
    cap = prediction.capacity
    return {"preset": prediction.preset, "line": prediction.line, "tokens": cap.tokens, "num_blocks": cap.num_blocks,
            "blocks_per_request": cap.blocks_per_request, "bytes_per_block": cap.bytes_per_block,
            "max_concurrency": round(cap.max_concurrency, 6), "blocks_factor": prediction.blocks_factor, "fits": cap.fits}
