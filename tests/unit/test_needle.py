"""Tests of needle codes, needle prompts, the corruption set, its scorer and the script."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from kvbake.operate.core.corpus import CHARS_PER_TOKEN, Corpus, Document
from kvbake.errors import KvbakeError
from kvbake.operate.core.needle import (
    CORRUPTION_SET_SIZE,
    NEEDLE_PATTERN,
    NEEDLE_QUESTION,
    build_corruption_set,
    build_needle_prompt,
    default_depths,
    find_codes,
    make_needle_codes,
    needle_sentence,
    score_corruption,
    score_recall,
)
from tests.doubles import write_tiny_corpus

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "needle.py"
CORPUS = Corpus(
    (
        Document("opinions_cl.jsonl", 1, "The appellate court affirmed the judgment below. " * 5),
        Document("filings_recap.jsonl", 1, "Motion to dismiss filed by the defendant. " * 5),
    )
)
CODES = make_needle_codes("tests", CORRUPTION_SET_SIZE)


def _depth_of(prompt_text: str, code: str) -> int:
    return prompt_text.index(needle_sentence(code)) // CHARS_PER_TOKEN


def test_codes_are_deterministic_distinct_and_well_formed() -> None:
    assert make_needle_codes("kvbake", 3) == ("NEEDLE-5CBE-120E", "NEEDLE-2CFD-1200", "NEEDLE-E565-690B")
    many = make_needle_codes("kvbake", 500)
    assert len(set(many)) == 500
    assert all(NEEDLE_PATTERN.fullmatch(code) for code in many)
    assert make_needle_codes("other", 3) != make_needle_codes("kvbake", 3)
    assert make_needle_codes(7, 0) == ()


def test_negative_code_count_is_refused() -> None:
    with pytest.raises(KvbakeError) as caught:
        make_needle_codes("x", -1)
    assert type(caught.value) is KvbakeError
    assert caught.value.exit_code == 1
    assert "-1 needle codes" in caught.value.message and "zero or more" in caught.value.fix


def test_find_codes_keeps_first_appearance_order_without_repeats() -> None:
    text = "NEEDLE-7F3A-19C2, then NEEDLE-0001-ABCD and NEEDLE-7F3A-19C2; NEEDLE-XXXX-XXXX needle-7f3a-19c2"
    assert find_codes(text) == ("NEEDLE-7F3A-19C2", "NEEDLE-0001-ABCD")
    assert find_codes(NEEDLE_QUESTION) == ()


def test_default_depths() -> None:
    assert default_depths(8000) == (4000, 7200)
    assert default_depths(9000, 3) == (2250, 4500, 6750)


def test_needles_start_exactly_at_their_token_depths() -> None:
    codes = make_needle_codes("depth", 2)
    prompt = build_needle_prompt(CORPUS, 524288, (450000, 500000), codes)
    assert prompt.estimated_tokens == 524288
    assert [_depth_of(prompt.text, code) for code in codes] == [450000, 500000]
    assert prompt.text.endswith(NEEDLE_QUESTION)
    assert find_codes(prompt.text) == codes


def test_needles_given_out_of_order_are_sorted_by_depth() -> None:
    first, second = make_needle_codes("order", 2)
    prompt = build_needle_prompt(CORPUS, 2000, (1500, 100), (first, second))
    assert prompt.depths == (100, 1500)
    assert prompt.codes == (second, first)
    assert _depth_of(prompt.text, second) == 100
    assert _depth_of(prompt.text, first) == 1500


def test_needle_at_depth_zero() -> None:
    (code,) = make_needle_codes("zero", 1)
    prompt = build_needle_prompt(CORPUS, 500, (0,), (code,))
    assert prompt.text.startswith(needle_sentence(code))


@pytest.mark.parametrize(
    ("ctx", "depths", "count", "named", "fix_names"),
    [
        (2000, (100,), 2, ("2 codes", "1 depths"), "one depth per needle code"),
        (2000, (100, 101), 2, ("at depth 101", "overlaps the previous needle"), "non-negative depths"),
        (2000, (-1,), 1, ("at depth -1", "before the start"), "non-negative depths"),
        (2000, (1990,), 1, ("depth 1990", "2000-token prompt"), "larger context"),
        (20, (0,), 1, ("depth 0", "20-token prompt"), "larger context"),
    ],
    ids=["one-depth-per-needle", "overlaps", "before-the-start", "do-not-fit", "tiny-context"],
)
def test_impossible_layouts_are_refused(ctx: int, depths: tuple[int, ...], count: int, named: tuple[str, ...], fix_names: str) -> None:
    with pytest.raises(KvbakeError) as caught:
        build_needle_prompt(CORPUS, ctx, depths, make_needle_codes("bad", count))
    assert type(caught.value) is KvbakeError
    assert caught.value.exit_code == 1
    assert all(field in caught.value.message for field in named), caught.value.message
    assert fix_names in caught.value.fix


def test_corruption_set_gives_each_request_its_own_codes() -> None:
    prompts = build_corruption_set(CORPUS, 3000, seed="set")
    assert len(prompts) == 16
    codes = [code for prompt in prompts for code in prompt.codes]
    assert len(codes) == len(set(codes)) == 32
    assert all(find_codes(prompt.text) == prompt.codes for prompt in prompts)
    assert all(prompt.estimated_tokens == 3000 for prompt in prompts)
    assert prompts[0].text != prompts[1].text


def _pairs(answers: dict[int, str]) -> list[tuple[tuple[str], str]]:
    return [((code,), answers.get(i, f"The code is {code}.")) for i, code in enumerate(CODES)]


def test_clean_answers_pass_sixteen_of_sixteen() -> None:
    verdict = score_corruption(_pairs({}))
    assert verdict.passed
    assert verdict.passed_count == 16
    assert [v.index for v in verdict.requests] == list(range(16))


def test_a_foreign_code_fails_only_the_request_that_shows_it() -> None:
    verdict = score_corruption(_pairs({5: f"{CODES[5]}, {CODES[9]}"}))
    assert verdict.passed_count == 15
    failed = [v for v in verdict.requests if not v.passed]
    assert [(v.index, v.missing, v.foreign) for v in failed] == [(5, (), (CODES[9],))]


def test_a_missing_own_code_fails_the_request() -> None:
    verdict = score_corruption(_pairs({3: "No code appears in the text."}))
    assert not verdict.passed
    assert [(v.index, v.missing) for v in verdict.requests if not v.passed] == [(3, (CODES[3],))]


def test_unknown_codes_are_reported_but_do_not_fail() -> None:
    verdict = score_corruption(_pairs({0: f"{CODES[0]} NEEDLE-0000-0000"}))
    assert verdict.passed
    assert verdict.requests[0].unknown == ("NEEDLE-0000-0000",)
    assert verdict.requests[0].foreign == ()


def test_a_code_shared_by_two_requests_is_refused() -> None:
    with pytest.raises(KvbakeError) as caught:
        score_corruption([((CODES[0],), ""), ((CODES[0],), "")])
    assert type(caught.value) is KvbakeError
    assert caught.value.exit_code == 1
    assert f"code {CODES[0]}" in caught.value.message and "two requests" in caught.value.message


def test_score_recall_lists_missing_codes_in_order() -> None:
    verdict = score_recall(CODES[:3], f"Codes: {CODES[1]}")
    assert verdict.missing == (CODES[0], CODES[2])
    assert not verdict.passed
    assert score_recall(CODES[:2], f"{CODES[1]}, {CODES[0]}").passed


def test_script_self_test_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert runpy.run_path(str(SCRIPT))["self_test"]() == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    assert "needle self-test: 15/15 checks passed" in out


def test_script_dry_run_prints_estimates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = runpy.run_path(str(SCRIPT))["main"]
    args = ["--dry-run", "--ctx", "8000", "--depths", "1000,6000", "--data-dir", str(write_tiny_corpus(tmp_path))]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "recall prompt: 8000 tokens (estimate)" in out
    assert "at token 1000 (estimate)" in out and "at token 6000 (estimate)" in out
    assert "corruption set: 16 requests of 8000 tokens each (estimate)" in out
    assert "32 codes, 2 per request, all distinct: True" in out


def test_script_reports_layout_errors_with_exit_code_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = runpy.run_path(str(SCRIPT))["main"]
    args = ["--dry-run", "--ctx", "100", "--depths", "99", "--data-dir", str(write_tiny_corpus(tmp_path))]
    assert main(args) == 1
    assert capsys.readouterr().err.startswith("error: needles up to depth 99 do not fit")
