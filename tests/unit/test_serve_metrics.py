"""Preemptions under pool pressure: the counter read from /metrics text, and the pressure step's verdict on it."""

from __future__ import annotations

from itertools import count

import pytest

from kvbake.errors import ValidationStop
from kvbake.operate.core.serve_metrics import DERIVED_FIX, PREEMPTIONS, counter_total, preemptions_during, with_preemptions
from kvbake.operate.core.validate_plan import StepResult
from tests.doubles.openai_double import OpenAIDouble
from tests.unit.test_validate_stops import last_report, manifest, run_plan, standin  # noqa: F401 - fixtures by name

METRICS = """# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="/models/served"} 3.0
vllm:num_preemptions_total{engine="1",model_name="/models/served"} 2.0
vllm:num_preemptions_created{engine="0",model_name="/models/served"} 1.79e+09
vllm:num_requests_running{engine="0"} 0.0
"""
PASSED = StepResult("pressure", "2/2 requests identical to their solo cold runs, 0 foreign codes, 2 concurrent 900-token requests",
                    data={"requests": 2, "prompt_tokens": [900]})


def test_a_counter_is_summed_over_its_label_sets() -> None:
    assert counter_total(METRICS, PREEMPTIONS) == 5.0
    assert counter_total(METRICS, "vllm:num_requests_running") == 0.0


def test_a_counter_without_samples_is_none() -> None:
    assert counter_total("# TYPE vllm:num_preemptions_total counter\n", PREEMPTIONS) is None
    assert counter_total("vllm:num_preemptions_total_other 4\n", PREEMPTIONS) is None


@pytest.mark.parametrize(("before", "after", "expected"), [(1.0, 4.0, 3), (None, 4.0, None), (2.0, None, None), (5.0, 2.0, 0)])
def test_preemptions_between_two_readings(before, after, expected) -> None:
    assert preemptions_during(before, after) == expected


def test_pressure_that_preempted_passes_and_says_how_often() -> None:
    result = with_preemptions(PASSED, 4)
    assert result.passed and result.summary.endswith("; 4 preemption(s) (vllm:num_preemptions_total)")
    assert result.data["preemptions"] == 4


def test_pressure_on_a_serve_without_the_counter_passes_and_says_so() -> None:
    result = with_preemptions(PASSED, None)
    assert result.passed and result.summary.endswith("; preemptions not counted (the serve exposes no vllm:num_preemptions_total)")


def test_pressure_that_preempted_nothing_stops_with_the_fix() -> None:
    result = with_preemptions(PASSED, 0)
    assert result.stop.startswith("no preemption: 2 concurrent 900-token requests")
    assert result.fix.startswith("pass --pressure auto (derived from the KV pool), or raise --pressure or --pressure-tokens")


def test_a_derived_pressure_that_preempted_nothing_names_the_pool_as_the_suspect() -> None:
    derived = StepResult("pressure", "9/9", data={"requests": 9, "prompt_tokens": [3936], "derivation": {"forced": True}})
    result = with_preemptions(derived, 0)
    assert result.stop.startswith("no preemption: 9 concurrent 3936-token requests") and result.fix == DERIVED_FIX
    assert result.data["preemptions"] == 0


def test_a_pressure_step_that_already_stopped_keeps_its_own_reason() -> None:
    failed = StepResult("pressure", "1/2", data={"requests": 2, "prompt_tokens": [900]}, stop="incorrect output: request 1")
    assert with_preemptions(failed, 0).stop == failed.stop


def test_the_plan_reads_the_counter_around_the_pressure_step(manifest) -> None:
    readings = count()
    with OpenAIDouble() as double:
        double.metrics = lambda: f"{PREEMPTIONS} {next(readings) * 3}\n"
        run_plan(manifest, double.url)
    pressure = last_report(manifest)["steps"][4]
    assert pressure["passed"] and pressure["data"]["preemptions"] == 3


def test_the_plan_stops_when_pressure_preempted_nothing(manifest) -> None:
    with OpenAIDouble() as double:
        double.metrics = lambda: f"{PREEMPTIONS} 7\n"
        with pytest.raises(ValidationStop, match=r"2 concurrent \d+-token requests") as caught:
            run_plan(manifest, double.url)
    assert caught.value.exit_code == 15
    assert caught.value.message.startswith("pressure: ") and "no preemption" in caught.value.message
