"""Command line of kv_arith: argv to typed options, one analysis, one rendering, one exit code."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from kvbake.errors import KvArithError, KvbakeError
from kvbake.kvarith.anchors import run_anchors
from kvbake.kvarith.calculator import Analysis, analyze
from kvbake.kvarith.capacity import ServeSettings, lookahead_extra_retained, parse_bytes
from kvbake.kvarith.config import load_config
from kvbake.kvarith.pressure import DEFAULT_MEM_FLOOR, PressureInputs, parse_mix, predict, pressure_dict, render_pressure
from kvbake.kvarith.report import render_text, to_dict
from kvbake.kvarith.specs import SpecOptions


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kv_arith", description="vLLM 0.33.0 KV-cache capacity arithmetic for DeepSeek-V4/V4.1-Flash.")
    parser.add_argument("--self-test", action="store_true", help="check every anchor and exit")
    parser.add_argument("--config", help="the model's config.json (a text_config wrapper is unwrapped)")
    parser.add_argument("--max-model-len", type=int, help="max_model_len, in tokens")
    pool = parser.add_mutually_exclusive_group()
    pool.add_argument("--pool-bytes", action="append", metavar="SIZE",
                      help="per-rank KV bytes (e.g. 10GiB); repeat or comma-separate for several ranks")
    pool.add_argument("--num-blocks", type=int, help="num_gpu_blocks_override instead of a pool")
    parser.add_argument("--block-size", type=int, help="compressed-cache block size (default 256 V4, 128 V4.1)")
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--concurrent-batches", type=int, default=2, help="2 with async scheduling, else 1")
    parser.add_argument("--mtp-layers", type=int, default=0, help="drafter layers, counted as SWA-only layers")
    parser.add_argument("--spec-tokens", type=int, default=0, help="num_speculative_tokens")
    parser.add_argument("--sm100", action="store_true", help="V4.1 MXFP8 records (528 B, 512-B pages)")
    parser.add_argument("--indexer-fp4", action="store_true", help="V4.1 MXFP4 indexer K cache")
    parser.add_argument("--indexer-sparse-logits", action="store_true", help="V4.1 256-B aligned indexer stride")
    parser.add_argument("--pack", action="append", default=[], metavar="GROUP=k",
                        help="k pages per stride for a group or a bucket (hypothetical packing)")
    parser.add_argument("--solve-tokens", type=int, metavar="T", help="list every N that logs exactly T tokens")
    parser.add_argument("--pressure", action="store_true", help="predict whether a request mix forces preemption")
    parser.add_argument("--mix", help="request mix LENGTH[xCOUNT],... for --pressure")
    parser.add_argument("--chunk-tokens", type=int, help="chunked-prefill size (default --max-num-batched-tokens)")
    parser.add_argument("--output-tokens", type=int, default=0, help="decoded tokens per request")
    parser.add_argument("--mem-available", metavar="SIZE", help="MemAvailable per rank with the pool allocated")
    parser.add_argument("--mem-floor", metavar="SIZE", help="MemAvailable floor per rank (default 1.5GiB)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    return parser


def parse_packing(items: Sequence[str]) -> dict[str, int]:
    packing = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            factor = int(value)
        except ValueError:
            factor = 0
        if not sep or not name or factor < 1:
            raise KvArithError(f"--pack {item!r} is not GROUP=k with k >= 1", "write e.g. --pack swa=2")
        packing[name] = factor
    return packing


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Self-test, or one analysis (with optional pressure) rendered as text or JSON."""
    if args.self_test:
        return self_test(out)
    if not args.config or args.max_model_len is None:
        raise KvArithError("--config and --max-model-len are required", "pass both, or use --self-test")
    if not args.pool_bytes and args.num_blocks is None:
        raise KvArithError("no pool given", "pass --pool-bytes SIZE or --num-blocks N")
    model = load_config(args.config)
    options = SpecOptions(args.block_size, args.sm100, args.mtp_layers, args.spec_tokens,
                          args.indexer_fp4, args.indexer_sparse_logits)
    settings = ServeSettings(args.max_model_len, args.max_num_batched_tokens, args.concurrent_batches,
                             lookahead_extra_retained(args.spec_tokens, args.mtp_layers))
    pools = [parse_bytes(p) for item in args.pool_bytes or () for p in item.split(",")]
    packing = parse_packing(args.pack)
    analysis = analyze(model, options, settings, pools, args.num_blocks, packing, args.solve_tokens)
    data = to_dict(analysis)
    text = render_text(analysis)
    if args.pressure:
        inputs = PressureInputs(
            parse_mix(args.mix or ""), args.chunk_tokens or args.max_num_batched_tokens,
            min(analysis.capacity.rank_pools), args.output_tokens,
            parse_bytes(args.mem_available) if args.mem_available else None,
            parse_bytes(args.mem_floor) if args.mem_floor else DEFAULT_MEM_FLOOR)
        verdict = predict(analysis.layout, settings, inputs, analysis_packing(analysis))
        data["pressure"] = pressure_dict(verdict)
        text += render_pressure(verdict, inputs, analysis.layout.stride)
    out.write(json.dumps(data, indent=2) + "\n" if args.json else text)
    return 0


def analysis_packing(analysis: Analysis) -> dict[str, int]:
    return {d.name: d.pack for d in analysis.capacity.demands if d.pack != 1}


def self_test(out: TextIO) -> int:
    results = run_anchors()
    for result in results:
        mark = "ok  " if result.ok else "MISS"
        detail = "" if result.ok else f": expected {result.expected!r}, got {result.actual!r}"
        out.write(f"{mark} {result.name}{detail}\n")
    misses = sum(not r.ok for r in results)
    out.write(f"{len(results) - misses} passed, {misses} failed\n")
    return 1 if misses else 0


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Parse, run, and turn a KvbakeError into its one-line message and exit code."""
    out, err = out or sys.stdout, err or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        return run(args, out)
    except KvbakeError as exc:
        err.write(f"error: {exc.one_line()}\n")
        return exc.exit_code
