"""One call from a model config and serving settings to the full analysis the CLI renders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvbake.errors import KvArithError
from kvbake.kvarith.capacity import (Capacity, ServeSettings, check_settings, compute_capacity, group_demands,
                                     solve_tokens)
from kvbake.kvarith.config import ModelConfig
from kvbake.kvarith.planner import Layout, check_packing, plan_layout
from kvbake.kvarith.specs import LayerSpec, SpecOptions, build_layer_specs


@dataclass(frozen=True)
class Analysis:
    """Specs, grouping and capacity for one model at one setting."""

    model: ModelConfig
    options: SpecOptions
    settings: ServeSettings
    specs: tuple[LayerSpec, ...]
    layout: Layout
    capacity: Capacity
    solved: tuple[int, ...] | None = None
    solve_target: int | None = None


@dataclass(frozen=True)
class Solution:
    """The block counts N for which vLLM would log `target` tokens, found without a pool."""

    model: ModelConfig
    settings: ServeSettings
    stride: int
    blocks_per_request: int
    target: int
    solved: tuple[int, ...]


def analyze(
    model: ModelConfig,
    options: SpecOptions,
    settings: ServeSettings,
    pools: Sequence[int] = (),
    num_blocks: int | None = None,
    packing: Mapping[str, int] | None = None,
    solve_target: int | None = None,
) -> Analysis:
    """Build the specs, plan the groups, and size the pool as vLLM 0.33.0 does."""
    specs, layout, factors = _plan(model, options, settings, packing)
    capacity = compute_capacity(layout, settings, pools, num_blocks, factors)
    solved = None
    if solve_target is not None:
        solved = solve_tokens(solve_target, capacity.blocks_per_request, settings.max_model_len)
    return Analysis(model, options, settings, specs, layout, capacity, solved, solve_target)


def solve_without_pool(
    model: ModelConfig,
    options: SpecOptions,
    settings: ServeSettings,
    solve_target: int,
    packing: Mapping[str, int] | None = None,
) -> Solution:
    """Every N that logs `solve_target` tokens: R and the stride need no pool."""
    _, layout, factors = _plan(model, options, settings, packing)
    check_settings(settings)
    demands = group_demands(layout, settings, factors)
    per_request = sum(d.blocks_per_request for d in demands)
    solved = solve_tokens(solve_target, per_request, settings.max_model_len)
    return Solution(model, settings, layout.stride, per_request, solve_target, solved)


def _plan(model: ModelConfig, options: SpecOptions, settings: ServeSettings,
          packing: Mapping[str, int] | None) -> tuple[tuple[LayerSpec, ...], Layout, dict[str, int]]:
    if settings.max_model_len > model.max_position_embeddings:
        raise KvArithError(
            f"max-model-len {settings.max_model_len:,} is above the model's "
            f"max_position_embeddings {model.max_position_embeddings:,}",
            f"pass --max-model-len {model.max_position_embeddings} or less",
        )
    specs = build_layer_specs(model, options)
    layout = plan_layout(specs)
    return specs, layout, check_packing(layout, packing or {})
