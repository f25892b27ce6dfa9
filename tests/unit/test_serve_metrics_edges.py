"""The preemption counter read from /metrics text at its edges: unreadable samples, exact names, whole preemptions."""

from __future__ import annotations

from kvbake.operate.core.serve_metrics import PREEMPTIONS, counter_total, preemptions_during, with_preemptions
from kvbake.operate.core.validate_plan import StepResult


def test_a_sample_whose_value_is_not_a_number_is_skipped() -> None:
    text = f"{PREEMPTIONS}{{engine=\"0\"}} many\n{PREEMPTIONS}{{engine=\"1\"}} 2.5\n"
    assert counter_total(text, PREEMPTIONS) == 2.5
    assert counter_total(f"{PREEMPTIONS} many\n", PREEMPTIONS) is None, "no readable sample: not exposed"


def test_only_the_exact_name_at_a_line_start_counts() -> None:
    text = f"x{PREEMPTIONS} 4\n# {PREEMPTIONS} 5\n{PREEMPTIONS}_created 6\n{PREEMPTIONS} 1\n"
    assert counter_total(text, PREEMPTIONS) == 1.0


def test_a_zero_counter_is_a_reading_not_an_absence() -> None:
    assert counter_total(f"{PREEMPTIONS} 0\n", PREEMPTIONS) == 0.0


def test_preemptions_are_whole_and_never_negative() -> None:
    assert preemptions_during(1.0, 3.9) == 2
    assert preemptions_during(0.0, 0.0) == 0
    assert preemptions_during(4.0, 1.0) == 0, "a serve restarted meanwhile: its counter began again"


def test_a_step_that_preempted_keeps_its_data_and_adds_the_count() -> None:
    step = StepResult("pressure", "2/2", data={"requests": 2, "prompt_tokens": [900], "derivation": {"forced": True}})
    result = with_preemptions(step, 1)
    assert result.stop is None and result.fix is None
    assert result.data == {"requests": 2, "prompt_tokens": [900], "derivation": {"forced": True}, "preemptions": 1}
    assert result.summary == "2/2; 1 preemption(s) (vllm:num_preemptions_total)"


def test_no_preemption_names_the_count_and_length_of_the_last_request() -> None:
    step = StepResult("pressure", "4/4", data={"requests": 4, "prompt_tokens": [100, 250]})
    result = with_preemptions(step, 0)
    assert result.stop.startswith("no preemption: 4 concurrent 250-token requests did not exceed the KV pool")
    assert result.summary == "4/4; 0 preemption(s) (vllm:num_preemptions_total)"
    assert "--pressure auto" in result.fix


def test_a_serve_without_the_counter_records_none_in_the_steps_data() -> None:
    step = StepResult("pressure", "2/2", data={"requests": 2, "prompt_tokens": [900]})
    assert with_preemptions(step, None).data == {"requests": 2, "prompt_tokens": [900], "preemptions": None}
