"""Record KV-capacity oracle cases by running the real vLLM planner on CPU in a throwaway virtualenv.

Outer mode (default) creates the virtualenv, installs torch and vLLM with only the packages the
planner imports need, then re-runs this file inside it with --inner. Inner mode builds the DeepSeek
V4 / V4.1 specs with vLLM's own spec classes, runs vLLM's own planner functions and writes the
cases. Nothing here imports kvbake: the oracle must not come from the calculator it checks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO / "tests" / "data" / "kvarith_configs"
CONFIGS = {"deepseek_v4": "deepseek_v4_flash.json", "deepseek_v41": "deepseek_v41_flash.json"}
DEFAULT_OUT = REPO / "tests" / "data" / "kv_oracle_vllm_0.33.0.json"
GIB = 1 << 30
# Import-time needs of vllm.v1.core.kv_cache_planning / kv_cache_utils / kv_cache_interface on CPU.
PLANNER_DEPS = (
    "packaging", "pydantic", "regex", "numpy", "cbor2", "psutil", "pyzmq", "urllib3", "transformers",
    "aiohttp", "requests", "openai-harmony", "openai", "pillow", "pybase64", "cachetools", "msgspec",
    "cloudpickle", "uvloop", "py-cpuinfo", "prometheus_client", "xgrammar", "fastapi",
    "partial-json-parser", "llguidance",
)


def install(venv: Path, vllm_version: str, torch_version: str) -> Path:
    """Create the throwaway virtualenv and install the planner's import closure."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, f"torch=={torch_version}"], check=True)
    subprocess.run([*pip, "--no-deps", f"vllm=={vllm_version}"], check=True)
    subprocess.run([*pip, *PLANNER_DEPS], check=True)
    return python


# ---- inner mode: runs inside the virtualenv, imports vLLM ----------------------------------------

def v4_specs(cfg: dict, case: dict) -> dict:
    """DeepSeek-V4 layer specs, with the constructor arguments of vllm/models/deepseek_v4."""
    import torch
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, SlidingWindowMLASpec, get_kv_quant_mode

    quant = get_kv_quant_mode("fp8_ds_mla")
    block = case["block_size"]
    specs: dict = {}
    for layer in range(cfg["num_hidden_layers"] + case["mtp_layers"]):
        ratio = cfg["compress_ratios"][layer] if layer < cfg["num_hidden_layers"] else 0
        p = f"model.layers.{layer}.attn"
        if ratio == 4:
            idx_dim = cfg["index_head_dim"]
            specs[f"{p}.indexer.k_cache"] = MLAAttentionSpec(
                block_size=block, num_kv_heads=1, max_tp_shards=1, head_size=idx_dim + idx_dim // 128 * 4,
                dtype=torch.uint8, tokens_per_state=4, alignment=576)
            specs[f"{p}.indexer.compressor.state_cache"] = SlidingWindowMLASpec(
                block_size=4, num_kv_heads=1, max_tp_shards=1, head_size=2 * 2 * idx_dim,
                dtype=torch.float32, sliding_window=8, alignment=576)
        specs[f"{p}.swa_cache"] = SlidingWindowMLASpec(
            bounded_replay=False, block_size=64, num_kv_heads=1, max_tp_shards=1, head_size=cfg["head_dim"],
            dtype=torch.uint8, sliding_window=cfg["sliding_window"], cache_dtype_str="fp8_ds_mla",
            state_content_bytes=584, alignment=576, block_stride_alignment=None, model_version="deepseek_v4",
            kv_quant_mode=quant)
        if ratio > 1:
            specs[p] = MLAAttentionSpec(
                block_size=block, num_kv_heads=1, max_tp_shards=1, head_size=cfg["head_dim"], dtype=torch.uint8,
                tokens_per_state=ratio, cache_dtype_str="fp8_ds_mla", alignment=576, model_version="deepseek_v4",
                kv_quant_mode=quant, state_content_bytes=584)
            coff = 2 if ratio == 4 else 1
            specs[f"{p}.compressor.state_cache"] = SlidingWindowMLASpec(
                block_size=4 if ratio == 4 else 8, num_kv_heads=1, max_tp_shards=1,
                head_size=2 * coff * cfg["head_dim"], dtype=torch.float32, sliding_window=coff * ratio,
                alignment=576)
    return specs


def v41_specs(cfg: dict, case: dict) -> dict:
    """DeepSeek-V4.1 layer specs, with the constructor arguments of vllm/models/deepseek_v41."""
    import torch
    from vllm.v1.kv_cache_interface import (
        CircularBufferSpec, MLAAttentionSpec, SlidingWindowMLASpec, get_kv_quant_mode)

    quant = get_kv_quant_mode("fp8_ds_mla")
    mxfp8 = case["sm100"]
    record, align = (528, 512) if mxfp8 else (584, 576)
    block = case["block_size"]
    rows = case["spec_tokens"] + 2
    ring_block = max(8, 1 << (rows - 1).bit_length())
    specs: dict = {}
    for layer in range(cfg["num_hidden_layers"] + case["mtp_layers"]):
        backbone = layer < cfg["num_hidden_layers"]
        ratios = cfg["compress_ratios"]
        ratio = int(ratios[layer]) if layer < len(ratios) else 0
        kv_source = backbone and layer in cfg["kv_source_layer_ids"]
        p = f"model.layers.{layer}.attn"
        if kv_source:
            specs[p] = MLAAttentionSpec(
                block_size=block, num_kv_heads=1, head_size=cfg["head_dim"], dtype=torch.uint8,
                tokens_per_state=ratio, cache_dtype_str="fp8_ds_mla", alignment=align,
                model_version="deepseek_v4", kv_quant_mode=quant, state_content_bytes=record)
            if layer in cfg["index_source_layer_ids"]:
                idx_dim = cfg["index_head_dim"]
                specs[f"{p}.indexer.k_cache"] = MLAAttentionSpec(
                    block_size=block, num_kv_heads=1, head_size=idx_dim + idx_dim // 128 * 4,
                    dtype=torch.uint8, tokens_per_state=ratio, alignment=align, block_stride_alignment=None)
        specs[f"{p}.swa_cache"] = SlidingWindowMLASpec(
            bounded_replay=True, block_size=32, num_kv_heads=1, max_tp_shards=1, head_size=cfg["head_dim"],
            dtype=torch.uint8, sliding_window=cfg["sliding_window"], cache_dtype_str="fp8_ds_mla",
            state_content_bytes=record, alignment=align,
            block_stride_alignment=math.lcm(record, record) if mxfp8 else None,
            model_version="deepseek_v4", kv_quant_mode=quant)
        if kv_source and ratio > 1:
            specs[f"{p}.compressor.state_cache"] = CircularBufferSpec(
                block_size=ring_block, num_kv_heads=1, head_size=2 * cfg["head_dim"], head_size_v=0,
                dtype=torch.float32)
    return specs


def stub_config(case: dict, ranks: int):
    """The parts of VllmConfig the planner reads, with a block-outermost layout."""
    lookahead = 0
    if case["spec_tokens"] > 0:
        lookahead = case["spec_tokens"] if min(case["mtp_layers"], case["spec_tokens"]) > 1 else 1
    return SimpleNamespace(
        cache_config=SimpleNamespace(
            kv_cache_layout="BLHNC", num_gpu_blocks_override=case["num_blocks_override"],
            prefix_cache_retention_interval=None, get_resolved_kv_cache_layout=_blhnc),
        scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=False,
                                         max_num_batched_tokens=case["max_num_batched_tokens"]),
        model_config=SimpleNamespace(supports_kv_cache_grouping=False, max_model_len=case["max_model_len"],
                                     original_max_model_len=case["max_model_len"]),
        attention_config=SimpleNamespace(hisparse_config=None),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1, tensor_parallel_size=ranks,
                                        pipeline_parallel_size=1, prefill_context_parallel_size=1),
        device_config=SimpleNamespace(device_type="cuda"),
        speculative_config=None,
        max_in_flight_tokens=case["concurrent_batches"] * case["max_num_batched_tokens"],
        num_prefill_lookahead_tokens=lookahead,
    )


def _blhnc():
    from vllm.v1.kv_cache_layout import KVCacheLayout

    return KVCacheLayout.BLHNC


def _forget_logged_once() -> None:
    """vLLM logs the capacity line once per distinct message; clear that memory so every case logs."""
    import vllm.logger

    once = getattr(vllm.logger, "_print_info_once", None)
    if hasattr(once, "cache_clear"):
        once.cache_clear()


class _LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "KV cache size:" in message:
            self.lines.append(message)


def run_case(case: dict, configs: dict, capture: _LogCapture) -> dict:
    """Run vLLM's planner for one case and return what it decided."""
    from vllm.utils.math_utils import cdiv
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config, get_kv_cache_capacity, update_kv_cache_capacity)

    cfg = configs[case["model"]]
    specs = (v4_specs if case["model"] == "deepseek_v4" else v41_specs)(cfg, case)
    pools = case["pool_bytes"] or [case["num_blocks_override"]]  # with an override vLLM ignores the pool
    config = stub_config(case, len(pools))
    worker_specs = [dict(specs) for _ in pools]
    groups = planning.get_global_kv_cache_groups(config, worker_specs)
    stride = planning._get_kv_cache_bytes_per_block(groups, _blhnc())
    found = {"stride": stride,
             "groups": [[len(g.layer_names), sum(s.page_size_bytes for s in g.kv_cache_spec.kv_cache_specs.values())]
                        for g in groups]}
    try:
        configs_per_rank = planning.get_kv_cache_configs(config, worker_specs, list(pools), groups)
    except ValueError as err:
        text = str(err)
        found.update(refused=True, refusal="no_memory" if "No available memory" in text else "too_small")
        return found
    scheduler = generate_scheduler_kv_cache_config(configs_per_rank)
    tokens, concurrency = get_kv_cache_capacity(config, scheduler)
    before = len(capture.lines)
    _forget_logged_once()
    update_kv_cache_capacity(config, scheduler)
    line = capture.lines[-1] if len(capture.lines) > before else None
    per_request = sum(cdiv(g.kv_cache_spec.max_memory_usage_bytes(config), g.kv_cache_spec.page_size_bytes)
                      for g in scheduler.kv_cache_groups)
    found.update(refused=False, num_blocks=scheduler.num_blocks, blocks_per_request=per_request,
                 max_concurrency=concurrency, tokens=tokens, log_line=line)
    return found


def case_matrix() -> list[dict]:
    """Both models x 4 lengths x 3 in-flight budgets x 4 pools, plus rank, override, SM100 and MTP cases."""
    base = {"block_size": None, "sm100": False, "spec_tokens": 0, "mtp_layers": 0, "num_blocks_override": None}
    cases = []
    for model in ("deepseek_v4", "deepseek_v41"):
        for length in (131_072, 327_680, 524_288, 1_048_576):
            for mnbt, batches in ((2048, 1), (2048, 2), (8192, 2)):
                for pool in ("3.49", "7.25", "10", "20"):
                    cases.append({**base, "model": model, "max_model_len": length, "max_num_batched_tokens": mnbt,
                                  "concurrent_batches": batches, "pool_bytes": [int(float(pool) * GIB)]})
    extras = [
        {"model": "deepseek_v41", "pool_bytes": [10 * GIB, int(9.5 * GIB)]},
        {"model": "deepseek_v4", "pool_bytes": [int(7.25 * GIB), 20 * GIB]},
        {"model": "deepseek_v41", "pool_bytes": None, "num_blocks_override": 46_603},
        {"model": "deepseek_v41", "pool_bytes": None, "num_blocks_override": 3_000},
        {"model": "deepseek_v4", "pool_bytes": None, "num_blocks_override": 2_971},
        {"model": "deepseek_v4", "pool_bytes": None, "num_blocks_override": 2_970},
        {"model": "deepseek_v41", "sm100": True, "pool_bytes": [10 * GIB]},
        {"model": "deepseek_v41", "sm100": True, "pool_bytes": [1 * GIB]},
        {"model": "deepseek_v41", "spec_tokens": 3, "mtp_layers": 3, "pool_bytes": [10 * GIB]},
        {"model": "deepseek_v41", "spec_tokens": 7, "mtp_layers": 3, "pool_bytes": [10 * GIB]},
        {"model": "deepseek_v4", "spec_tokens": 1, "mtp_layers": 1, "pool_bytes": [10 * GIB]},
        {"model": "deepseek_v41", "block_size": 64, "pool_bytes": [10 * GIB]},
        {"model": "deepseek_v41", "pool_bytes": [230_400]},
    ]
    for extra in extras:
        cases.append({**base, "max_model_len": 327_680, "max_num_batched_tokens": 2048, "concurrent_batches": 2,
                      **extra})
    for i, case in enumerate(cases):
        case["block_size"] = case["block_size"] or (256 if case["model"] == "deepseek_v4" else 128)
        case["id"] = f"{i:03d}-{case['model']}-L{case['max_model_len']}"
    return cases


def inner(out: Path) -> int:
    import vllm
    from vllm.logger import init_logger

    capture = _LogCapture()
    init_logger("vllm")
    logging.getLogger("vllm").setLevel(logging.INFO)
    logging.getLogger("vllm").addHandler(capture)
    configs = {}
    for model, file in CONFIGS.items():
        data = json.loads((CONFIG_DIR / file).read_text())
        configs[model] = data.get("text_config", data)
    cases = []
    for case in case_matrix():
        case["expect"] = run_case(case, configs, capture)
        cases.append(case)
    record = {"vllm_version": vllm.__version__, "recorded": datetime.date.today().isoformat(),
              "source": "vLLM planner functions run on CPU with hand-built specs (scripts/record_kv_oracle.py)",
              "cases": cases}
    out.write_text(json.dumps(record, indent=1) + "\n")
    refused = sum(c["expect"]["refused"] for c in cases)
    print(f"recorded {len(cases)} cases ({refused} refused) from vLLM {vllm.__version__} into {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "kvbake-oracle-venv",
                        help="throwaway virtualenv outside the repository")
    parser.add_argument("--vllm-version", default="0.33.0")
    parser.add_argument("--torch-version", default="2.13.0")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--skip-install", action="store_true", help="reuse an already prepared --venv")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        return inner(args.out)
    python = args.venv / "bin" / "python" if args.skip_install else install(
        args.venv, args.vllm_version, args.torch_version)
    return subprocess.run([str(python), "-B", __file__, "--inner", "--out", str(args.out)], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
