"""Exact-value tests of prefix_identity.py that the mutation run showed were missing: block edges, checks, prompts."""

from __future__ import annotations

import pytest

from kvbake.operate.core.corpus import Corpus, Document
from kvbake.errors import KvbakeError, ValidationStop
from kvbake.operate.core.prefix_identity import (DEFAULT_BLOCK, DIVERGENCE_MARKERS, FLOOR_TOLERANCE, SUMMARY_QUESTION, Check, Observation,
                                    OutputDifference, PrefixObservations, PrefixVerdict, build_prefix_prompts, check_fresh_salt,
                                    comparison_floor, expected_cached_tokens, output_difference, partial_prefix_cached_tokens,
                                    score_prefix_sequence, shared_prefix_length, within_floor)

CORPUS = Corpus((Document("opinions_cl.jsonl", 1, "alpha beta. "), Document("filings_recap.jsonl", 1, "gamma. ")))


def test_the_constants() -> None:
    assert (DEFAULT_BLOCK, FLOOR_TOLERANCE) == (384, 1e-12)
    assert SUMMARY_QUESTION == "\n\nQuestion: Summarise the text above in three sentences.\nAnswer:"
    assert DIVERGENCE_MARKERS == ("\n\n--- another record ---\n\n", "\t--- another record ---\n\n")


@pytest.mark.parametrize(("n", "block", "cached"), [(1, 1, 0), (2, 1, 1), (5, 1, 4), (768, 384, 384), (769, 384, 768), (383, 384, 0)])
def test_expected_cached_tokens_at_the_edges(n: int, block: int, cached: int) -> None:
    assert expected_cached_tokens(n, block) == cached


@pytest.mark.parametrize(("m", "n", "block", "cached"), [
    # n a multiple of the block and m >= n - 1: the last token is computed, so the last block is not cached
    (768, 768, 384, 384), (767, 768, 384, 384), (5000, 768, 384, 384), (384, 384, 384, 0), (16, 16, 16, 0),
    (0, 1, 1, 0), (1, 2, 1, 1), (3, 2, 1, 1), (0, 800, 384, 0), (400, 800, 384, 384), (800, 800, 384, 768),
])
def test_partial_prefix_caps_the_shared_tokens_at_n_minus_one(m: int, n: int, block: int, cached: int) -> None:
    assert partial_prefix_cached_tokens(m, n, block) == cached


def test_the_default_block_applies_to_the_partial_count() -> None:
    assert partial_prefix_cached_tokens(800, 1000) == 768


@pytest.mark.parametrize(("call", "message", "fix"), [
    (lambda: expected_cached_tokens(-3), "n must be a positive token count, got -3", "pass n >= 1"),
    (lambda: expected_cached_tokens(3, -1), "block must be a positive token count, got -1", "pass block >= 1"),
    (lambda: partial_prefix_cached_tokens(1, 3, 0), "block must be a positive token count, got 0", "pass block >= 1"),
    (lambda: partial_prefix_cached_tokens(-2, 0), "m must be zero or more tokens, got -2", "pass m >= 0"),
    (lambda: build_prefix_prompts(CORPUS, 0, 0), "n must be a positive token count, got 0", "pass n >= 1"),
    (lambda: build_prefix_prompts(CORPUS, 30, -1), "shared tokens must be zero or more tokens, got -1", "pass shared tokens >= 0"),
    (lambda: build_prefix_prompts(CORPUS, 15, 0), "15 tokens cannot hold the question", "pass n >= 17"),
    # exactly the question: it holds, but no shared prefix can diverge before it
    (lambda: build_prefix_prompts(CORPUS, 16, 0),
     "a 16-token prompt cannot share 0 tokens and still diverge before its question", "pass a smaller shared token count"),
    (lambda: build_prefix_prompts(CORPUS, 30, 8),
     "a 30-token prompt cannot share 8 tokens and still diverge before its question", "pass a smaller shared token count"),
])
def test_every_refusal_is_a_kvbake_error_with_its_fix(call, message: str, fix: str) -> None:
    with pytest.raises(KvbakeError) as caught:
        call()
    assert type(caught.value) is KvbakeError
    assert (caught.value.message, caught.value.fix) == (message, fix)


@pytest.mark.parametrize(("a", "b", "length"), [("abc", "abd", 2), ("", "", 0), ("ab", "ab", 2), ("abc", "ab", 2), ([1], [2], 0)])
def test_shared_prefix_length(a, b, length: int) -> None:
    assert shared_prefix_length(a, b) == length


def test_output_difference_does_not_treat_frequent_characters_as_junk() -> None:
    a, b = "ab" * 150, "ab" * 149 + "ba"
    assert output_difference(a, b) == OutputDifference(first_divergence=298, distance=pytest.approx(1 - 299 / 300))
    assert output_difference("abcd", "abxy") == OutputDifference(2, 0.5)
    assert output_difference("", "x") == OutputDifference(0, 1.0)
    assert not output_difference("a", "b").identical
    assert output_difference("same", "same").identical


def test_the_floor_of_two_controls_is_their_difference_and_of_more_the_largest() -> None:
    assert comparison_floor(["abcd", "abxy"]) == OutputDifference(2, 0.5)
    assert comparison_floor(["abcd", "abcd", "abcx", "wxyz"]) == OutputDifference(0, 1.0)
    assert comparison_floor(("x", "x")) == OutputDifference(None, 0.0)
    with pytest.raises(KvbakeError) as caught:
        comparison_floor([])
    assert (caught.value.message, caught.value.fix) == (
        "a comparison floor needs at least two control outputs, got 0", "run the uncached control request at least twice")


@pytest.mark.parametrize(("candidate", "floor", "passes"), [
    (0.5, 0.5, True), (0.5 + 5e-13, 0.5, True), (0.5 + FLOOR_TOLERANCE, 0.5, True), (0.5 + 5e-12, 0.5, False), (0.0, 0.0, True), (1e-13, 0.0, True), (0.1, 0.0, False),
])
def test_within_floor_allows_the_floor_plus_a_rounding_tolerance(candidate: float, floor: float, passes: bool) -> None:
    assert within_floor(OutputDifference(1, candidate), OutputDifference(1, floor)) is passes


def test_the_fresh_salt_guard_names_the_control_and_the_fix() -> None:
    assert check_fresh_salt(0) is None
    with pytest.raises(ValidationStop) as caught:
        check_fresh_salt(1)
    assert type(caught.value) is ValidationStop
    assert caught.value.exit_code == 15
    assert "reported 1 cached tokens instead of 0" in caught.value.message
    assert "cache_salt" in caught.value.fix
    with pytest.raises(ValidationStop) as caught:
        check_fresh_salt(-1, label="my control")
    assert caught.value.message.startswith("my control reported -1 cached tokens instead of 0")


def observations(**changes) -> PrefixObservations:
    values = dict(cold=Observation(800, 0, "abcd"), hit=Observation(800, 768, "abcd"), fresh_salt=Observation(800, 0, "abcd"),
                  partial=Observation(800, 384, "wxyz"), partial_control=Observation(800, 0, "wxyz"), shared_tokens=500)
    values.update(changes)
    return PrefixObservations(**values)


def test_a_passing_run_has_every_check_with_its_detail() -> None:
    verdict = score_prefix_sequence(observations())
    floor = "distance 0.000000 (first divergence at None), floor 0.000000"
    assert verdict == PrefixVerdict(checks=(
        Check("same prompt", True, "prompt_tokens cold/hit/fresh-salt [800]"),
        Check("cold cached tokens", True, "cached_tokens 0, expected 0"),
        Check("hit cached tokens", True, "cached_tokens 768, expected 768"),
        Check("hit output", True, floor),
        Check("partial-prefix cached tokens", True, "cached_tokens 384, expected 384"),
        Check("partial-prefix output", True, floor),
    ), floor=OutputDifference(None, 0.0))
    assert verdict.passed and verdict.failures == ()


def test_a_failing_run_lists_exactly_its_failed_checks() -> None:
    verdict = score_prefix_sequence(observations(cold=Observation(800, 1, "abcd"), hit=Observation(801, 0, "abxy"),
                                                 partial=Observation(800, 0, "wxyz"), shared_tokens=800, block=16))
    assert verdict.failures == (
        Check("same prompt", False, "prompt_tokens cold/hit/fresh-salt [800, 801]"),
        Check("cold cached tokens", False, "cached_tokens 1, expected 0"),
        Check("hit cached tokens", False, "cached_tokens 0, expected 784"),
        Check("hit output", False, "distance 0.500000 (first divergence at 2), floor 0.000000"),
        Check("partial-prefix cached tokens", False, "cached_tokens 0, expected 784"),
    )
    assert not verdict.passed


def test_the_partial_checks_follow_what_was_observed() -> None:
    no_partial = score_prefix_sequence(observations(partial=None, partial_control=None, shared_tokens=None))
    assert [c.name for c in no_partial.checks] == ["same prompt", "cold cached tokens", "hit cached tokens", "hit output"]
    no_control = score_prefix_sequence(observations(partial_control=None))
    assert [c.name for c in no_control.checks][-1] == "partial-prefix cached tokens"
    with pytest.raises(KvbakeError) as caught:
        score_prefix_sequence(observations(shared_tokens=None, partial_control=None))
    assert (caught.value.message, caught.value.fix) == ("a partial-prefix observation needs shared_tokens", "pass the shared token count m")


def test_the_controls_widen_the_floor_for_every_output_check() -> None:
    verdict = score_prefix_sequence(observations(hit=Observation(800, 768, "abxy"), controls=("abcx",)))
    assert verdict.floor == OutputDifference(3, 0.25)
    assert [c.name for c in verdict.failures] == ["hit output"]
    assert score_prefix_sequence(observations(hit=Observation(800, 768, "abxy"), controls=("abxy",))).passed


def test_a_leaking_partial_control_stops_the_run() -> None:
    with pytest.raises(ValidationStop) as caught:
        score_prefix_sequence(observations(partial_control=Observation(800, 16, "wxyz")))
    assert caught.value.message.startswith("partial-prefix fresh-salt control reported 16 cached tokens instead of 0")


def test_the_prompts_are_exactly_the_corpus_a_marker_and_the_question() -> None:
    prompts = build_prefix_prompts(CORPUS, 30, 5)
    assert prompts.full == "alpha beta. \n\ngamma. \n\nalpha beta. \n\ngamma. \n\nalpha beta" + SUMMARY_QUESTION
    assert prompts.partial == "alpha beta. \n\ngamma." + DIVERGENCE_MARKERS[0] + "gamma. \n\na" + SUMMARY_QUESTION
    assert (prompts.n_tokens, prompts.shared_tokens) == (30, 5)


def test_where_the_full_prompt_goes_on_with_a_newline_the_other_marker_is_used() -> None:
    corpus = Corpus((Document("opinions_cl.jsonl", 1, "abcd"),))
    prompts = build_prefix_prompts(corpus, 30, 1)
    assert prompts.full[4] == "\n"
    assert prompts.partial == "abcd" + DIVERGENCE_MARKERS[1] + ("abcd\n\n" * 5)[:27] + SUMMARY_QUESTION


def test_a_prompt_sharing_nothing_starts_with_a_marker() -> None:
    prompts = build_prefix_prompts(CORPUS, 30, 0)
    assert prompts.partial == DIVERGENCE_MARKERS[0] + "gamma. \n\nalpha beta. \n\ngamma. " + SUMMARY_QUESTION
