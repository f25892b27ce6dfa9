"""The pressure prediction: held sliding window, MemAvailable floor, and the verdict."""

from __future__ import annotations

import pytest

from kvbake.errors import KvArithError
from kvbake.kvarith.capacity import GIB, ServeSettings
from kvbake.kvarith.config import parse_config
from kvbake.kvarith.planner import plan_layout
from kvbake.kvarith.pressure import PressureInputs, parse_mix, predict, pool_for_test, window_span
from kvbake.kvarith.specs import SpecOptions, build_layer_specs
from kvbake.kvarith.examples import v41_flash_config

LAYOUT = plan_layout(build_layer_specs(parse_config(v41_flash_config()), SpecOptions()))
SETTINGS = ServeSettings(327_680, 2048, 2)


def test_window_span_counts_straddled_blocks() -> None:
    assert window_span(end=64, held=32, block=32) == 1
    assert window_span(end=65, held=32, block=32) == 2
    assert window_span(end=10, held=100, block=32) == 1


def test_held_window_is_smaller_than_the_admission_cap() -> None:
    verdict = predict(LAYOUT, SETTINGS, PressureInputs(((150_000, 1),), 2048, 10 * GIB))
    request = verdict.requests[0]
    # MLA 1,172 blocks + ring 1; four SWA groups hold the 127+2,048-token window, not 127+4,096.
    assert request.admission_blocks == 1_172 + 1 + 4 * 133
    assert request.held_blocks < request.admission_blocks
    assert request.held_blocks == 1_172 + 1 + 4 * 69


def test_floor_grows_the_test_pool_by_the_headroom() -> None:
    assert pool_for_test(10 * GIB, mem_available=4 * GIB, floor=3 * GIB // 2) == 10 * GIB + 5 * GIB // 2
    assert pool_for_test(10 * GIB, mem_available=None, floor=3 * GIB // 2) == 10 * GIB


def test_verdict_flips_at_the_predicted_count() -> None:
    one = predict(LAYOUT, SETTINGS, PressureInputs(((150_000, 1),), 2048, 2 * GIB))
    count = one.min_requests_to_force
    below = predict(LAYOUT, SETTINGS, PressureInputs(((150_000, count - 1),), 2048, 2 * GIB))
    at = predict(LAYOUT, SETTINGS, PressureInputs(((150_000, count),), 2048, 2 * GIB))
    assert not below.preemption_required
    assert at.preemption_required


def test_mix_parsing_and_errors() -> None:
    assert parse_mix("150000x3, 32000") == ((150_000, 3), (32_000, 1))
    with pytest.raises(KvArithError) as entry:
        parse_mix("long")
    assert entry.value.exit_code == 17
    assert all(field in entry.value.message for field in ("--mix", "'long'", "LENGTH[xCOUNT]"))
    assert "150000x3,32000x2" in entry.value.fix
    with pytest.raises(KvArithError) as request:
        predict(LAYOUT, SETTINGS, PressureInputs(((400_000, 1),), 2048, 10 * GIB))
    assert request.value.exit_code == 17
    assert "400,000 tokens" in request.value.message and "max-model-len" in request.value.message
    assert "--max-model-len" in request.value.fix
