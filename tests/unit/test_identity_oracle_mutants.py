"""The identity oracle's check names, fixes, data keys and excerpt edges, pinned as behaviour."""

from __future__ import annotations

from message_words import says
from test_oracle import NEEDLE, completion, digest, identity_set, needles

from kvbake.operate.core.identity_oracle import excerpt, score_identity_set, score_needles_identity
from kvbake.operate.core.validate_plan import FAILED_FIX


def test_an_excerpt_that_reaches_the_end_of_the_text_has_no_trailing_ellipsis() -> None:
    text = "0123456789abcdefghij"
    assert excerpt(text, len(text) - 8) == repr("…" + text[4:])


def test_the_needle_checks_are_named_in_order() -> None:
    assert [c.name for c in needles().checks] == ["same prompt", "hit cached tokens", "hit output", "fresh-salt output"]


def test_agreeing_needle_outputs_are_described_as_identical_without_a_difference() -> None:
    hit_output, fresh_output = needles().checks[2:]
    for check in (hit_output, fresh_output):
        assert says(check.detail, "identical to its cold run") and not says(check.detail, "differs")


def test_the_needle_hit_expects_the_cached_count_of_the_block_size_given() -> None:
    cold = completion("Summary 0123456789", tokens=100)
    hit = completion("Summary 0123456789", cached=96, tokens=100)
    result = score_needles_identity(NEEDLE, cold, hit, cold, 16)
    assert result.passed and result.checks[1].passed


def test_the_needle_data_names_each_field() -> None:
    assert needles().data == {"oracle": "identity", "depths": [1000, 3000], "prompt_tokens": 5048,
                              "codes": list(NEEDLE.codes), "cached_tokens": {"cold": 0, "hit": 4992, "fresh_salt": 0}}


def test_passing_needles_carry_no_fix_and_failing_needles_the_failed_run_fix() -> None:
    assert needles().fix is None
    assert needles(hit="Summary 01234").fix == FAILED_FIX


def test_the_identity_checks_are_named_by_request_counted_from_one() -> None:
    prompts, concurrent, solo = identity_set(3)
    result = score_identity_set("corruption set", prompts, concurrent, solo)
    assert [c.name for c in result.checks] == ["request 1", "request 2", "request 3"]


def test_a_passing_identity_set_carries_no_fix_and_a_failing_one_the_failed_run_fix() -> None:
    prompts, concurrent, solo = identity_set(2)
    assert score_identity_set("corruption set", prompts, concurrent, solo).fix is None
    concurrent[1] = completion(digest(1)[:12])
    assert score_identity_set("corruption set", prompts, concurrent, solo).fix == FAILED_FIX
