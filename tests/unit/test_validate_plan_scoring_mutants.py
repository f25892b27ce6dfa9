"""Tests of the plan's step scorers that pin their summaries, data fields, fixes and check details."""

from __future__ import annotations

import hashlib

from message_words import says

from kvbake.operate.core.needle import build_needle_prompt, make_needle_codes
from kvbake.operate.core.prefix_identity import Observation, PrefixObservations
from kvbake.operate.core.validate_plan import (
    FAILED_FIX, score_inertness, score_needle_set, score_needles, score_prefix, synthetic_corpus,
)
from tests.unit.test_validate_plan import completion, corruption_set, observations


def test_control_inertness_summary_counts_runs_and_ends_at_the_distance() -> None:
    result = score_inertness([completion("same")] * 3, control=True)
    assert says(result.summary, "3 fresh-salt runs")
    assert result.summary.endswith("distance 0.000000")


def test_baseline_inertness_summary_says_the_distance_is_recorded_as_the_floor() -> None:
    result = score_inertness([completion("same")] * 3, control=False)
    assert says(result.summary, "recorded as the floor")


def test_inertness_data_counts_runs_and_hashes_the_first_output() -> None:
    result = score_inertness([completion("first"), completion("second"), completion("second")], control=False)
    assert result.data["runs"] == 3
    assert result.data["output_sha256"] == hashlib.sha256(b"first").hexdigest()


def test_prefix_without_a_partial_request_records_no_partial_count() -> None:
    plain = PrefixObservations(Observation(8000, 0, "out"), Observation(8000, 7680, "out"), Observation(8000, 0, "out"))
    result = score_prefix(plain)
    assert result.passed and result.data["cached_tokens"]["partial"] is None


def test_prefix_data_keeps_the_block_and_the_floor() -> None:
    result = score_prefix(observations())
    assert result.data["block"] == 384 and result.data["floor"] == 0.0


def test_prefix_summary_counts_passing_checks_out_of_all() -> None:
    passing = score_prefix(observations())
    total = len(passing.checks)
    assert says(passing.summary, f"{total}/{total} checks")
    failing = score_prefix(observations(hit_cached=7296))
    assert says(failing.summary, f"{total - 1}/{total} checks")


def test_needle_set_detail_of_a_passing_request_says_every_own_code_came_back() -> None:
    prompts, answers = corruption_set()
    result = score_needle_set("corruption set", prompts, answers)
    assert all(says(check.detail, "every own code") for check in result.checks)
    assert result.fix is None


def test_needle_set_detail_names_the_owner_of_a_foreign_code_and_the_data_counts_it() -> None:
    prompts, answers = corruption_set()
    answers[1] = completion(answers[1].text + ", " + prompts[3].codes[0])
    result = score_needle_set("corruption set", prompts, answers)
    assert says(result.checks[1].detail, f"foreign {prompts[3].codes[0]} (request 4)")
    assert result.data["foreign"] == 1
    assert result.fix == FAILED_FIX


def test_needle_set_detail_lists_every_unknown_code() -> None:
    prompts, answers = corruption_set()
    answers[0] = completion(answers[0].text + ", NEEDLE-0000-0000, NEEDLE-1111-1111")
    result = score_needle_set("corruption set", prompts, answers)
    assert result.passed
    assert says(result.checks[0].detail, "unknown NEEDLE-0000-0000, NEEDLE-1111-1111")


def needle_prompt_and_codes():
    codes = make_needle_codes("n", 2)
    return build_needle_prompt(synthetic_corpus(), 4000, (1000, 3000), codes), codes


def test_needles_summary_counts_recalled_codes_and_lists_the_depths() -> None:
    prompt, codes = needle_prompt_and_codes()
    result = score_needles(prompt, completion(codes[0], tokens=4000))
    assert says(result.summary, "1/2 needles recalled")
    assert says(result.summary, "1000, 3000")
    assert says(result.summary, "4000-token prompt")


def test_needles_data_keeps_depths_prompt_tokens_and_codes() -> None:
    prompt, codes = needle_prompt_and_codes()
    result = score_needles(prompt, completion(", ".join(codes), tokens=4000))
    assert result.data["depths"] == [1000, 3000]
    assert result.data["prompt_tokens"] == 4000
    assert result.data["codes"] == list(codes)
