"""Tests of the prefix-identity arithmetic, output scorer, fresh-salt guard, sequence verdict and script."""

from __future__ import annotations

import dataclasses
import runpy
from pathlib import Path
from typing import Any

import pytest

from kvbake.operate.core.corpus import Corpus, Document, estimate_tokens
from kvbake.errors import KvbakeError, ValidationStop
from kvbake.operate.core.prefix_identity import (
    SUMMARY_QUESTION,
    Observation,
    OutputDifference,
    PrefixObservations,
    build_prefix_prompts,
    check_fresh_salt,
    comparison_floor,
    expected_cached_tokens,
    output_difference,
    partial_prefix_cached_tokens,
    score_prefix_sequence,
    shared_prefix_length,
    within_floor,
)
from tests.doubles import write_tiny_corpus

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "prefix_identity.py"
TEXT = "The court held that the claim was timely."
CORPUS = Corpus(
    (Document("opinions_cl.jsonl", 1, "The court held. " * 30), Document("filings_recap.jsonl", 1, "Filed. " * 9))
)


@pytest.mark.parametrize(
    ("n", "block", "cached"),
    [(8000, 384, 7680), (385, 384, 384), (384, 384, 0), (1, 384, 0), (769, 384, 768), (768, 384, 384),
     (327680, 384, 327552), (524288, 384, 524160), (17, 16, 16), (16, 16, 0)],
)
def test_expected_cached_tokens_follows_the_block_rule(n: int, block: int, cached: int) -> None:
    assert expected_cached_tokens(n, block) == cached


def test_default_block_is_384() -> None:
    assert expected_cached_tokens(8000) == 7680


@pytest.mark.parametrize(
    ("m", "n", "cached"), [(1000, 8000, 768), (8000, 8000, 7680), (9000, 8000, 7680), (383, 8000, 0), (0, 8000, 0),
                           (768, 8000, 768), (767, 8000, 384), (5000, 1000, 768)],
)
def test_partial_prefix_counts_only_shared_whole_blocks(m: int, n: int, cached: int) -> None:
    assert partial_prefix_cached_tokens(m, n, 384) == cached


@pytest.mark.parametrize(
    ("call", "named", "bound"),
    [(lambda: expected_cached_tokens(0), ("n must", "got 0"), "n >= 1"),
     (lambda: expected_cached_tokens(10, 0), ("block must", "got 0"), "block >= 1"),
     (lambda: partial_prefix_cached_tokens(-1, 10), ("m must", "got -1"), "m >= 0"),
     (lambda: partial_prefix_cached_tokens(5, 0), ("n must", "got 0"), "n >= 1")],
    ids=["no-tokens", "no-block", "negative-shared", "partial-no-tokens"],
)
def test_impossible_counts_are_refused(call: Any, named: tuple[str, ...], bound: str) -> None:
    with pytest.raises(KvbakeError) as caught:
        call()
    assert type(caught.value) is KvbakeError
    assert caught.value.exit_code == 1
    assert all(field in caught.value.message for field in named), caught.value.message
    assert bound in caught.value.fix


def test_shared_prefix_length() -> None:
    assert shared_prefix_length([1, 2, 3], [1, 2, 4]) == 2
    assert shared_prefix_length("abc", "abcdef") == 3
    assert shared_prefix_length("", "x") == 0


def test_identical_outputs_have_no_divergence_and_zero_distance() -> None:
    diff = output_difference(TEXT, TEXT)
    assert diff == OutputDifference(first_divergence=None, distance=0.0)
    assert diff.identical


def test_output_difference_reports_first_divergence_and_distance() -> None:
    assert output_difference("abcd", "abxy") == OutputDifference(first_divergence=2, distance=0.5)
    prefix = output_difference("abc", "abcdef")
    assert prefix.first_divergence == 3
    assert prefix.distance == pytest.approx(1 / 3)
    assert output_difference("abcd", "wxyz").distance == 1.0


def test_output_difference_distance_is_symmetric() -> None:
    assert output_difference(TEXT, TEXT[::-1]).distance == output_difference(TEXT[::-1], TEXT).distance


def test_comparison_floor_is_the_largest_control_difference() -> None:
    assert comparison_floor(["abcd", "abcd", "abxy", "abcx"]).distance == 0.5
    assert comparison_floor([TEXT, TEXT]).identical
    with pytest.raises(KvbakeError) as caught:
        comparison_floor([TEXT])
    assert type(caught.value) is KvbakeError
    assert caught.value.exit_code == 1
    assert "two control outputs" in caught.value.message and "got 1" in caught.value.message
    assert "at least twice" in caught.value.fix


def test_within_floor_allows_at_most_the_floor() -> None:
    zero = OutputDifference(None, 0.0)
    assert within_floor(zero, zero)
    assert not within_floor(OutputDifference(2, 0.5), zero)
    assert within_floor(OutputDifference(3, 0.25), OutputDifference(2, 0.5))
    assert within_floor(OutputDifference(2, 0.5), OutputDifference(2, 0.5))
    assert not within_floor(OutputDifference(2, 0.51), OutputDifference(2, 0.5))


def test_fresh_salt_guard() -> None:
    check_fresh_salt(0)
    with pytest.raises(ValidationStop) as caught:
        check_fresh_salt(384)
    assert "384 cached tokens" in caught.value.message
    assert "invalid" in caught.value.message
    assert caught.value.exit_code == 15


def _good(**changes: Any) -> PrefixObservations:
    base = PrefixObservations(
        cold=Observation(8000, 0, TEXT),
        hit=Observation(8000, 7680, TEXT),
        fresh_salt=Observation(8000, 0, TEXT),
        partial=Observation(8000, 768, "Other."),
        partial_control=Observation(8000, 0, "Other."),
        shared_tokens=1000,
    )
    return dataclasses.replace(base, **changes)


def _failed(obs: PrefixObservations) -> list[str]:
    return [check.name for check in score_prefix_sequence(obs).failures]


def test_a_correct_sequence_passes_every_check() -> None:
    verdict = score_prefix_sequence(_good())
    assert verdict.passed
    assert [check.name for check in verdict.checks] == [
        "same prompt", "cold cached tokens", "hit cached tokens", "hit output",
        "partial-prefix cached tokens", "partial-prefix output",
    ]
    assert verdict.floor.identical


def test_every_failure_is_listed_together() -> None:
    obs = _good(cold=Observation(8000, 384, TEXT), hit=Observation(8000, 7296, "The court erred."),
                partial=Observation(8000, 384, "Else."))
    assert _failed(obs) == ["cold cached tokens", "hit cached tokens", "hit output",
                            "partial-prefix cached tokens", "partial-prefix output"]


def test_wrong_hit_count_names_both_counts() -> None:
    verdict = score_prefix_sequence(_good(hit=Observation(8000, 7296, TEXT)))
    failures = [(check.name, check.detail) for check in verdict.failures]
    assert failures == [("hit cached tokens", "cached_tokens 7296, expected 7680")]


def test_different_prompt_lengths_fail_the_same_prompt_check() -> None:
    assert _failed(_good(hit=Observation(8001, 7680, TEXT))) == ["same prompt"]


def test_run_to_run_floor_from_controls_admits_a_difference_of_that_size() -> None:
    drift = "The court held that the claim was late."
    assert _failed(_good(hit=Observation(8000, 7680, drift))) == ["hit output"]
    assert _failed(_good(hit=Observation(8000, 7680, drift), controls=(drift,))) == []


def test_fresh_salt_leak_stops_the_run() -> None:
    with pytest.raises(ValidationStop, match="fresh-salt control reported 7680"):
        score_prefix_sequence(_good(fresh_salt=Observation(8000, 7680, TEXT)))
    with pytest.raises(ValidationStop, match="partial-prefix fresh-salt control reported 768"):
        score_prefix_sequence(_good(partial_control=Observation(8000, 768, "Other.")))


def test_partial_without_shared_tokens_is_refused_and_partial_is_optional() -> None:
    with pytest.raises(KvbakeError) as caught:
        score_prefix_sequence(_good(shared_tokens=None))
    assert type(caught.value) is KvbakeError
    assert caught.value.exit_code == 1
    assert "partial-prefix" in caught.value.message and "shared_tokens" in caught.value.message
    assert score_prefix_sequence(_good(partial=None, partial_control=None, shared_tokens=None)).passed


def test_prefix_prompts_have_exact_lengths_and_shared_prefix() -> None:
    prompts = build_prefix_prompts(CORPUS, 1000, 300)
    assert (estimate_tokens(prompts.full), estimate_tokens(prompts.partial)) == (1000, 1000)
    assert shared_prefix_length(prompts.full, prompts.partial) == 1200
    assert prompts.full.endswith(SUMMARY_QUESTION) and prompts.partial.endswith(SUMMARY_QUESTION)


def test_prefix_prompts_diverge_even_where_the_full_prompt_has_a_newline() -> None:
    corpus = Corpus((Document("opinions_cl.jsonl", 1, "\n\n\n\n"),))
    prompts = build_prefix_prompts(corpus, 500, 100)
    assert shared_prefix_length(prompts.full, prompts.partial) == 400


@pytest.mark.parametrize(("n", "shared", "named", "fix_names"), [
    (10, 0, ("10 tokens", "question"), "n >= "),
    (1000, 995, ("1000-token prompt", "share 995 tokens"), "smaller shared token count"),
    (1000, 1000, ("1000-token prompt", "share 1000 tokens"), "smaller shared token count"),
], ids=["10-0", "1000-995", "1000-1000"])
def test_prompts_that_cannot_hold_their_parts_are_refused(n: int, shared: int, named: tuple[str, ...], fix_names: str) -> None:
    with pytest.raises(KvbakeError) as caught:
        build_prefix_prompts(CORPUS, n, shared)
    assert type(caught.value) is KvbakeError
    assert caught.value.exit_code == 1
    assert all(field in caught.value.message for field in named), caught.value.message
    assert fix_names in caught.value.fix


def test_script_self_test_passes(capsys: pytest.CaptureFixture[str]) -> None:
    script = runpy.run_path(str(SCRIPT))
    assert script["self_test"]() == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    assert "ok    expected_cached_tokens(8000, 384) = 7680" in out


def test_script_dry_run_prints_estimates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--dry-run", "--n", "8000", "--shared", "1000", "--data-dir", str(write_tiny_corpus(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "full prompt:    8000 tokens (estimate)" in out
    assert "hit         7680 (estimate)" in out
    assert "partial     768 (estimate)" in out


def test_script_reports_corpus_errors_with_their_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--dry-run", "--data-dir", str(tmp_path / "absent")]) == 16
    assert capsys.readouterr().err.startswith("error: corpus folder ")
