"""Renders an analysis as text for people and as a JSON-ready dict for machines."""

from __future__ import annotations

from typing import Any

from kvbake.kvarith.calculator import Analysis, Solution
from kvbake.kvarith.capacity import GIB
from kvbake.kvarith.planner import Layout
from kvbake.kvarith.specs import LayerSpec


def spec_rows(specs: tuple[LayerSpec, ...]) -> list[dict[str, Any]]:
    """One row per distinct layer role, with its layer count."""
    rows: dict[str, dict[str, Any]] = {}
    for spec in specs:
        row = rows.get(spec.role)
        if row is None:
            rows[spec.role] = {
                "role": spec.role, "class": spec.kind, "block_size": spec.block_size,
                "content_bytes": spec.content_bytes, "tokens_per_state": spec.tokens_per_state,
                "alignment": spec.alignment, "window": spec.window, "stride_alignment": spec.stride_alignment,
                "page_bytes": spec.page_bytes, "unpadded_page_bytes": spec.unpadded_page_bytes, "layers": 1,
            }
        else:
            row["layers"] += 1
    return list(rows.values())


def layout_dict(layout: Layout) -> dict[str, Any]:
    return {
        "buckets": [
            {"name": b.name, "class": b.first.kind, "block_size": b.first.block_size, "layers": len(b.layers),
             "pages": [{"page_bytes": page, "layers": len(names)} for page, names in b.pages],
             "balanced": b.balanced}
            for b in layout.buckets
        ],
        "repeats_per_group": layout.repeats_per_group,
        "anchor_bytes": layout.anchor_bytes,
        "states_per_block": dict(layout.states_per_block),
        "stride": layout.stride,
    }


def to_dict(analysis: Analysis) -> dict[str, Any]:
    """Everything the text report shows, as plain data."""
    cap = analysis.capacity
    out: dict[str, Any] = {
        "model": analysis.model.title,
        "family": analysis.model.family,
        "max_model_len": cap.max_model_len,
        "in_flight_tokens": analysis.settings.in_flight_tokens,
        "extra_retained_tokens": analysis.settings.extra_retained_tokens,
        "specs": spec_rows(analysis.specs),
        "grouping": layout_dict(analysis.layout),
        "groups": [
            {"name": d.name, "class": d.kind, "layers": d.num_layers, "bytes_per_block": d.bytes_per_block,
             "blocks_per_request": d.blocks_per_request, "pack": d.pack}
            for d in cap.demands
        ],
        "stride": cap.stride,
        "rank_pool_bytes": list(cap.rank_pools),
        "rank_blocks": list(cap.rank_blocks),
        "num_blocks": cap.num_blocks,
        "blocks_per_request": cap.blocks_per_request,
        "max_concurrency": cap.max_concurrency,
        "tokens": cap.tokens,
        "log_line": cap.log_line,
        "fits": cap.fits,
        "refusal": cap.refusal,
    }
    if analysis.solve_target is not None:
        out["solve_tokens"] = solve_dict(analysis.solve_target, analysis.solved or (), cap.stride)
    return out


def solve_dict(target: int, solved: tuple[int, ...], stride: int) -> dict[str, Any]:
    return {"target": target, "num_blocks": list(solved),
            "pool_bytes_ranges": [[n * stride, (n + 1) * stride - 1] for n in solved]}


def solution_dict(solution: Solution) -> dict[str, Any]:
    """A pool-less --solve-tokens answer as plain data."""
    return {
        "model": solution.model.title,
        "family": solution.model.family,
        "max_model_len": solution.settings.max_model_len,
        "in_flight_tokens": solution.settings.in_flight_tokens,
        "stride": solution.stride,
        "blocks_per_request": solution.blocks_per_request,
        "solve_tokens": solve_dict(solution.target, solution.solved, solution.stride),
    }


def render_solution(solution: Solution) -> str:
    """The human report of a pool-less --solve-tokens."""
    data = solution_dict(solution)
    lines = [f"{data['model']} at max-model-len {data['max_model_len']:,}, "
             f"{data['in_flight_tokens']:,} in-flight tokens",
             f"Stride: {data['stride']:,} B per block    R (blocks per request): {data['blocks_per_request']:,}"]
    return "\n".join(lines + _solve_lines(data["solve_tokens"], data["blocks_per_request"])) + "\n"


def render_text(analysis: Analysis) -> str:
    """The human report: specs, grouping trace, groups, capacity and verdict."""
    data = to_dict(analysis)
    lines = [f"{data['model']} at max-model-len {data['max_model_len']:,}, "
             f"{data['in_flight_tokens']:,} in-flight tokens", "", "Per-layer specs:",
             f"  {'role':<18}{'class':<22}{'block':>6}{'C':>7}{'tps':>5}{'align':>6}{'page':>9}{'unpadded':>10}{'layers':>7}"]
    for row in data["specs"]:
        lines.append(f"  {row['role']:<18}{row['class']:<22}{row['block_size']:>6}{row['content_bytes']:>7}"
                     f"{row['tokens_per_state']:>5}{row['alignment'] or '-':>6}{row['page_bytes']:>9,}"
                     f"{row['unpadded_page_bytes']:>10,}{row['layers']:>7}")
    lines += ["", "Grouping trace:"]
    grouping = data["grouping"]
    for b in grouping["buckets"]:
        pages = " + ".join(f"{p['layers']}x{p['page_bytes']:,}" for p in b["pages"])
        lines.append(f"  bucket {b['name']:<10} {b['class']:<22} block {b['block_size']:>4}: {pages}"
                     f"{' (balanced)' if b['balanced'] else ''}")
    lines.append(f"  repeats_per_group = {grouping['repeats_per_group']}, anchor_bytes = {grouping['anchor_bytes']:,}")
    for name, states in grouping["states_per_block"].items():
        lines.append(f"  state bucket {name}: at most {states} layers per group")
    lines += ["", "Groups:", f"  {'group':<12}{'layers':>7}{'bytes/block':>13}{'blocks/request':>16}{'pack':>6}"]
    for g in data["groups"]:
        lines.append(f"  {g['name']:<12}{g['layers']:>7}{g['bytes_per_block']:>13,}{g['blocks_per_request']:>16,}"
                     f"{g['pack']:>6}")
    lines += _capacity_lines(data)
    return "\n".join(lines) + "\n"


def _capacity_lines(data: dict[str, Any]) -> list[str]:
    pools = ", ".join(f"{p:,} B ({p / GIB:.2f} GiB)" for p in data["rank_pool_bytes"])
    lines = ["", f"Stride: {data['stride']:,} B per block", f"Pool per rank: {pools}",
             f"N (min over ranks): {data['num_blocks']:,}    R (blocks per request): {data['blocks_per_request']:,}",
             f"Capacity ratio N/R: {data['max_concurrency']:.4f} (allocator arithmetic, not measured concurrency)",
             f"vLLM logs: {data['log_line']}"]
    if data["fits"]:
        lines.append("Start-up: vLLM starts (one full-length request fits beside the null block)")
    else:
        lines.append(f"Start-up: vLLM REFUSES to start: {data['refusal']}")
    solve = data.get("solve_tokens")
    if solve is not None:
        lines += _solve_lines(solve, data["blocks_per_request"])
    return lines


def _solve_lines(solve: dict[str, Any], blocks_per_request: int) -> list[str]:
    if not solve["num_blocks"]:
        return [f"Solve {solve['target']:,}: no block count N gives this token count at R = {blocks_per_request:,}"]
    return [f"Solve {solve['target']:,}: N = {n:,} (pool {low:,}..{high:,} B)"
            for n, (low, high) in zip(solve["num_blocks"], solve["pool_bytes_ranges"])]
