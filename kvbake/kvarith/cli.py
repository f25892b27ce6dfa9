"""Command line of kv_arith: argv to typed options, one analysis, one rendering, one exit code."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import NoReturn, TextIO

from kvbake.errors import KvArithError, KvbakeError, UsageError
from kvbake.kvarith.anchors import run_anchors
from kvbake.kvarith.calculator import Analysis, analyze, solve_without_pool
from kvbake.kvarith.capacity import ServeSettings, lookahead_extra_retained, parse_bytes
from kvbake.kvarith.config import load_config
from kvbake.kvarith.limits import INT_OPTIONS, MAX_PACK, check_int
from kvbake.kvarith.pressure import DEFAULT_MEM_FLOOR, PressureInputs, parse_mix, predict, pressure_dict, render_pressure
from kvbake.kvarith.report import render_solution, render_text, solution_dict, to_dict
from kvbake.kvarith.specs import SpecOptions

USAGE_EXIT_CODE = UsageError.exit_code


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors end in one line and an exit code, not in usage text and SystemExit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, "see kv_arith --help")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
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
    parser.add_argument("--solve-tokens", type=int, metavar="T",
                        help="list every N that logs exactly T tokens (needs no pool)")
    parser.add_argument("--pressure", action="store_true", help="predict whether a request mix forces preemption")
    parser.add_argument("--mix", help="request mix LENGTH[xCOUNT],... for --pressure")
    parser.add_argument("--chunk-tokens", type=int, help="chunked-prefill size (default --max-num-batched-tokens)")
    parser.add_argument("--output-tokens", type=int, default=0, help="decoded tokens per request")
    parser.add_argument("--mem-available", metavar="SIZE", help="MemAvailable per rank with the pool allocated")
    parser.add_argument("--mem-floor", metavar="SIZE", help="MemAvailable floor per rank (default 1.5GiB)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    return parser


PRESSURE_ONLY = ("--mix", "--chunk-tokens", "--mem-available", "--mem-floor")


def check_options(args: argparse.Namespace) -> None:
    """Refuse out-of-range integers, empty values and options that would be silently ignored."""
    for bound in INT_OPTIONS:
        value = getattr(args, _attribute(bound.option))
        if value is not None:
            check_int(bound.option, value, bound.low, bound.high)
    if args.config == "":
        raise KvArithError("--config is empty", "pass the path of the model's config.json")
    if not args.config or args.max_model_len is None:
        raise KvArithError("--config and --max-model-len are required", "pass both, or use --self-test")
    if not args.pressure:
        given = [name for name in PRESSURE_ONLY if getattr(args, _attribute(name)) is not None]
        if given or args.output_tokens:
            raise KvArithError(f"{(given or ['--output-tokens'])[0]} is used only with --pressure",
                               "add --pressure, or drop the option")
    if args.mem_floor is not None and args.mem_available is None:
        raise KvArithError("--mem-floor is used only with --mem-available", "pass both, or neither")
    if args.pressure and args.mix is None:
        raise KvArithError("--pressure needs a request mix", "pass --mix LENGTH[xCOUNT],...")
    if args.pressure and not args.pool_bytes and args.num_blocks is None:
        raise KvArithError("--pressure needs a pool", "pass --pool-bytes SIZE or --num-blocks N")
    if not args.pool_bytes and args.num_blocks is None and args.solve_tokens is None:
        raise KvArithError("no pool given", "pass --pool-bytes SIZE or --num-blocks N (or only --solve-tokens T)")


def _attribute(option: str) -> str:
    return option.removeprefix("--").replace("-", "_")


def parse_packing(items: Sequence[str]) -> dict[str, int]:
    packing: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            factor = int(value)
        except ValueError:
            factor = 0
        if not sep or not name.strip() or factor < 1:
            raise KvArithError(f"--pack {item!r} is not GROUP=k with k >= 1", "write e.g. --pack swa=2")
        check_int(f"--pack {name}", factor, 1, MAX_PACK)
        if name in packing:
            raise KvArithError(f"--pack names {name!r} twice", "give each group or bucket one factor")
        packing[name] = factor
    return packing


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Self-test, or one analysis (with optional pressure) rendered as text or JSON."""
    if args.self_test:
        return self_test(out)
    check_options(args)
    pools = [parse_bytes(p, "--pool-bytes") for item in args.pool_bytes or () for p in item.split(",")]
    packing = parse_packing(args.pack)
    model = load_config(args.config)
    options = SpecOptions(args.block_size, args.sm100, args.mtp_layers, args.spec_tokens,
                          args.indexer_fp4, args.indexer_sparse_logits)
    settings = ServeSettings(args.max_model_len, args.max_num_batched_tokens, args.concurrent_batches,
                             lookahead_extra_retained(args.spec_tokens, args.mtp_layers))
    if not pools and args.num_blocks is None:
        solution = solve_without_pool(model, options, settings, args.solve_tokens, packing)
        out.write(json.dumps(solution_dict(solution), indent=2) + "\n" if args.json else render_solution(solution))
        return 0
    analysis = analyze(model, options, settings, pools, args.num_blocks, packing, args.solve_tokens)
    data = to_dict(analysis)
    text = render_text(analysis)
    if args.pressure:
        inputs = pressure_inputs(args, min(analysis.capacity.rank_pools))
        verdict = predict(analysis.layout, settings, inputs, analysis_packing(analysis))
        data["pressure"] = pressure_dict(verdict)
        text += render_pressure(verdict, inputs, analysis.layout.stride)
    out.write(json.dumps(data, indent=2) + "\n" if args.json else text)
    return 0


def pressure_inputs(args: argparse.Namespace, pool: int) -> PressureInputs:
    """The request mix and memory facts of --pressure; unset options take their documented defaults."""
    chunk = args.max_num_batched_tokens if args.chunk_tokens is None else args.chunk_tokens
    available = None if args.mem_available is None else parse_bytes(args.mem_available, "--mem-available")
    floor = DEFAULT_MEM_FLOOR if args.mem_floor is None else parse_bytes(args.mem_floor, "--mem-floor")
    return PressureInputs(parse_mix(args.mix), chunk, pool, args.output_tokens, available, floor)


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
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        err.write(f"error: {exc.one_line()}\n")
        return USAGE_EXIT_CODE
    try:
        return run(args, out)
    except KvbakeError as exc:
        err.write(f"error: {exc.one_line()}\n")
        return exc.exit_code
