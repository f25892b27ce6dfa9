"""Behaviour tests of the plan's options, pressure, filler, depths, step results, report dict and report text (mutation gaps)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvbake.errors import PresetError, UsageError
from kvbake.operate.adapters.memwatch import GIB
from kvbake.serve.core.presets import ChosenPreset
from kvbake.operate.core.validate_plan import (
    ANSWER_TOKENS, FAILED_FIX, make_options, not_run, parse_depths, parse_pressure, report_text, report_to_dict,
    score_inertness, stopped, synthetic_corpus,
)
from message_words import says
from test_validate_plan import PACKED, completion, options, report

LIMIT = PACKED.max_model_len - ANSWER_TOKENS


def passing_step():
    return score_inertness([completion("same")] * 3, control=True)


def failing_step():
    return score_inertness([completion("one"), completion("two"), completion("one")], control=True)


def test_synthetic_filler_has_48_records_of_40_sentences_numbered_from_one() -> None:
    documents = synthetic_corpus().documents
    assert len(documents) == 48
    assert [doc.line for doc in documents] == list(range(1, 49))
    assert all(doc.text.count(f" of record {doc.line}.") == 40 for doc in documents)


def test_synthetic_filler_names_its_source() -> None:
    assert synthetic_corpus().sources == ("synthetic",)


def test_synthetic_filler_first_sentences_are_fixed() -> None:
    first = synthetic_corpus(records=1, sentences=2).documents[0].text
    assert first.startswith("The filing denied the court on day 48 of record 1.")
    assert first.endswith("The docket set aside the filing on day 11 of record 1.")


def test_a_depth_of_zero_is_allowed() -> None:
    assert parse_depths("0,500") == (0, 500)


def test_a_stopped_step_says_it_stopped_and_did_not_pass() -> None:
    step = stopped("needles", "HTTP 500", None)
    assert says(step.summary, "stopped")
    assert step.fix == FAILED_FIX and not step.passed


def test_a_scored_step_keeps_its_summary() -> None:
    assert says(passing_step().summary, "3 fresh-salt runs")


def test_a_failing_scored_step_carries_the_standard_fix() -> None:
    step = failing_step()
    assert step.stop is not None and step.fix == FAILED_FIX


def test_a_passing_scored_step_has_no_fix() -> None:
    step = passing_step()
    assert step.passed and step.fix is None


def test_report_dict_names_the_preset_fields_and_times() -> None:
    data = report_to_dict(replace(report([passing_step()]), chosen=ChosenPreset(PACKED, "held preset allowed")))
    assert data["status"] == "validated" and data["override"] == "held preset allowed"
    assert data["max_model_len"] == 327680 and data["switches"] == {"VLLM_DSV41_KV_PAIR": "3"}
    assert data["started"] == "2026-10-23T10:15:00Z" and data["finished"] == "2026-10-23T10:16:00Z"


def test_report_dict_lists_each_steps_stop_and_its_checks() -> None:
    failed = failing_step()
    data = report_to_dict(report([failed, not_run("prefix identity", "not run")]))
    first, second = data["steps"]
    assert first["stop"] == failed.stop and second["stop"] is None
    assert [(c["name"], c["passed"]) for c in first["checks"]] == [("same prompt", True), ("identical outputs", False)]


def memory_text(**memory) -> str:
    return report_text(replace(report([passing_step()]), memory=memory))


def test_report_text_states_the_memory_floor_in_gib() -> None:
    text = memory_text(watched=False, floor_bytes=100 * GIB)
    assert says(text, "floor 100.00 GiB")


def test_report_text_lists_the_lowest_reading_of_each_node() -> None:
    text = memory_text(watched=True, floor_bytes=GIB, samples=2, lowest_bytes={"spark-a": 4 * GIB, "spark-b": 2 * GIB})
    assert says(text, "lowest MemAvailable spark-a 4.00 GiB, spark-b 2.00 GiB")


def test_report_text_says_when_no_memory_was_read() -> None:
    text = memory_text(watched=True, floor_bytes=GIB, samples=0, lowest_bytes={})
    assert says(text, "lowest MemAvailable not read")


def test_report_text_names_the_model_or_says_it_is_unknown() -> None:
    assert says(report_text(report([passing_step()])), "model m")
    assert says(report_text(replace(report([passing_step()]), model=None)), "model unknown")


def test_report_text_names_the_override_or_none() -> None:
    assert says(report_text(report([passing_step()])), "override: none")
    overridden = replace(report([passing_step()]), chosen=ChosenPreset(PACKED, "held preset allowed"))
    assert says(report_text(overridden), "override: held preset allowed")


def test_report_text_numbers_the_steps_from_one() -> None:
    lines = report_text(report([passing_step(), not_run("prefix identity", "not run")])).splitlines()
    assert any(line.startswith("1 inertness ") for line in lines)
    assert any(line.startswith("2 prefix identity ") for line in lines)


def step_states(text: str) -> list[str]:
    """The state column of each numbered step line: after the number and the 16-wide step name."""
    return [line.split(" ", 1)[1][17:].split()[0] for line in text.splitlines() if line[:1].isdigit()]


def test_report_text_marks_each_step_passed_stopped_or_not_run() -> None:
    steps = [passing_step(), stopped("prefix identity", "HTTP 500", None), not_run("corruption set", "not run")]
    assert step_states(report_text(report(steps))) == ["passed", "STOPPED", "-"]


def test_report_text_ends_with_the_rollback_line() -> None:
    text = report_text(report([passing_step()]))
    assert text.endswith("\n") and text.splitlines()[-1] == "rollback: not requested"


def test_garbage_pressure_is_refused_with_a_fix() -> None:
    with pytest.raises(UsageError) as caught:
        parse_pressure("lots")
    assert says(caught.value.fix, "--pressure auto") and says(caught.value.fix, "KV pool")


def test_auto_pressure_refuses_pressure_tokens_with_a_fix() -> None:
    with pytest.raises(UsageError) as caught:
        make_options(PACKED, "salt", "kvbake", None, 8000, 8000, "auto", 1000)
    assert says(caught.value.fix, "--pressure auto")


def test_negative_pressure_is_refused_with_the_count_and_a_fix() -> None:
    with pytest.raises(UsageError) as caught:
        options(pressure=-1)
    assert caught.value.exit_code == 2
    assert says(caught.value.message, "--pressure -1") and says(caught.value.fix, "concurrent long requests")


def test_auto_pressure_sets_no_request_count_and_keeps_the_salt() -> None:
    plan = make_options(PACKED, "salt", "kvbake", None, 8000, 8000, "auto", None)
    assert plan.pressure_auto and plan.runs_pressure and plan.pressure == 0
    assert plan.salt_prefix == "salt" and plan.salt("cold") == "salt-cold"


def too_long(**sizes) -> str:
    arguments = {"depths": None, "prefix_tokens": 8000, "corruption_tokens": 8000, "pressure": 0, "pressure_tokens": None}
    with pytest.raises(PresetError) as caught:
        make_options(PACKED, "salt", "kvbake", **(arguments | sizes))
    return caught.value.message


def test_too_long_names_each_oversized_flag() -> None:
    message = too_long(prefix_tokens=LIMIT + 1, corruption_tokens=LIMIT + 2)
    assert says(message, f"--prefix-tokens {LIMIT + 1}, --corruption-tokens {LIMIT + 2}")


def test_too_long_pressure_tokens_are_refused_for_a_request_count() -> None:
    assert says(too_long(pressure=2, pressure_tokens=LIMIT + 1), f"--pressure-tokens {LIMIT + 1}")


def test_a_needle_must_lie_more_than_32_tokens_before_the_prompt_end() -> None:
    assert says(too_long(depths=(LIMIT - 32,)), f"needle depth {LIMIT - 32}")
    assert make_options(PACKED, "salt", "kvbake", (LIMIT - 33,), 8000, 8000, 0, None).needle_tokens == LIMIT
