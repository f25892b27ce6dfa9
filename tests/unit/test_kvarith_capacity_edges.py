"""Capacity at its edges: a one-byte pool, each group's class, underscores in sizes, and what an analysis keeps."""

from __future__ import annotations

from kvbake.kvarith.calculator import analyze
from kvbake.kvarith.capacity import GIB, ServeSettings, compute_capacity, group_demands, parse_bytes
from kvbake.kvarith.config import parse_config
from kvbake.kvarith.examples import v41_flash_config
from kvbake.kvarith.planner import plan_layout
from kvbake.kvarith.specs import SpecOptions, build_layer_specs

MODEL = parse_config(v41_flash_config())
OPTIONS = SpecOptions(block_size=64, sm100=True)
LAYOUT = plan_layout(build_layer_specs(MODEL, SpecOptions()))
SETTINGS = ServeSettings(327_680)


def test_a_one_byte_pool_is_sized_and_refused_for_holding_no_block() -> None:
    capacity = compute_capacity(LAYOUT, SETTINGS, [1])
    assert (capacity.num_blocks, capacity.fits, capacity.rank_pools) == (0, False, (1,))


def test_each_group_demand_carries_the_class_of_its_first_layer() -> None:
    demands = group_demands(LAYOUT, SETTINGS, {})
    assert [d.kind for d in demands] == [g.first.kind for g in LAYOUT.groups]
    assert len({d.kind for d in demands}) == 3


def test_underscores_anywhere_in_a_size_are_dropped_in_its_unit_too() -> None:
    assert parse_bytes("10_GiB") == 10 * GIB
    assert parse_bytes("10G_iB") == 10 * GIB


def test_an_analysis_keeps_its_options_and_solves_nothing_without_a_target() -> None:
    analysis = analyze(MODEL, OPTIONS, SETTINGS, [10 * GIB])
    assert analysis.options is OPTIONS
    assert analysis.solved is None and analysis.solve_target is None
    assert analyze(MODEL, OPTIONS, SETTINGS, [10 * GIB], solve_target=5).solved == ()
