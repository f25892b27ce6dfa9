"""Tests of the pure oracle parts: the recall probe and the choice, the identity scorers and the report's oracle line."""

from __future__ import annotations

import json
import re

import pytest

from kvbake.operate.core.corpus import estimate_tokens
from kvbake.errors import UsageError, ValidationStop
from kvbake.manifest import Preset
from kvbake.operate.core.identity_oracle import excerpt, first_difference, score_identity_set, score_needles_identity
from kvbake.operate.adapters.memwatch import GIB
from kvbake.operate.core.needle import build_corruption_set, build_needle_prompt, find_codes, make_needle_codes
from kvbake.operate.core.completions import Completion
from kvbake.operate.core.oracle import (
    NOT_CHOSEN, NOT_RECALLED, ORACLES, PROBE_DEPTH, PROBE_TOKENS, RECALLED, OracleChoice, build_probe, check_oracle,
    choose_oracle, initial_choice, oracle_to_dict, probe_data,
)
from kvbake.serve.core.presets import ChosenPreset
from kvbake.operate.core.validate_plan import Report, make_options, report_text, report_to_dict, score_inertness, synthetic_corpus

PACKED = Preset("packing-327680", "validated", 327680, {"VLLM_DSV41_KV_PAIR": "3"}, "packing", 384, ())
LEAK = "reported 384 cached tokens instead of 0, so cache hits leak across salts and this run is invalid"
FIX = ("check that the serve receives cache_salt and isolates its cache by salt, restore the base serve, "
       "and rerun with a new salt")


def completion(text: str, cached: int = 0, tokens: int = 2000) -> Completion:
    return Completion(text=text, prompt_tokens=tokens, cached_tokens=cached)


# -- the difference between two texts ------------------------------------------------------------------------


def test_equal_texts_have_no_difference() -> None:
    assert first_difference("Summary 0123", "Summary 0123") is None


@pytest.mark.parametrize(("candidate", "reference", "expected"), [
    ("Summary 0123456789ab", "Summary 0123456789abcdef0123456789abcdef",
     "at character 20 ('…456789ab' vs '…456789abcdef0123…')"),
    ("", "Summary 0123", "at character 0 ('' vs 'Summary …')"),
    ("abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyZ", "at character 25 ('…rstuvwxyz' vs '…rstuvwxyZ')"),
    ("a\nb", "a\nc", "at character 2 ('a\\nb' vs 'a\\nc')"),
    ("It's", "It is", "at character 2 (\"It's\" vs 'It is')"),
], ids=["truncated", "empty", "last-character", "newline", "quote"])
def test_the_first_difference_names_the_character_and_quotes_both_texts_around_it(candidate, reference, expected) -> None:
    assert first_difference(candidate, reference) == expected
    assert "\n" not in expected


@pytest.mark.parametrize(("candidate", "reference", "at"), [
    ("Summary  0123", "Summary 0123", 8),
    ("Summary 0123 ", "Summary 0123", 12),
    ("Summary\t0123", "Summary 0123", 7),
    ("Summary 0123", "Summary\n0123", 7),
    (" Summary 0123", "Summary 0123", 0),
    ("Summary 0123", "Summary 0123\n", 12),
    ("Summary\u00a00123", "Summary 0123", 7),
], ids=["doubled-space", "trailing-space", "tab", "newline", "leading-space", "trailing-newline", "no-break-space"])
def test_a_difference_only_in_whitespace_is_a_difference(candidate, reference, at) -> None:
    assert first_difference(candidate, reference).startswith(f"at character {at} ")
    prompts, concurrent, solo = identity_set(2)
    concurrent[1], solo[1] = completion(candidate), completion(reference)
    result = score_identity_set("corruption set", prompts, concurrent, solo)
    assert result.stop.startswith(f"incorrect output: request 2 under concurrency differs from its solo cold run at character {at} ")
    assert [c.passed for c in result.checks] == [True, False] and result.data["identical"] == 1
    cold = completion(reference, tokens=4000)
    needles = score_needles_identity(NEEDLE, cold, completion(candidate, cached=3840, tokens=4000), cold, 384)
    assert needles.stop.startswith(f"incorrect output: the needle prompt's prefix-cache hit differs from its cold run "
                                   f"at character {at} ")


def test_an_excerpt_is_cut_on_both_sides_with_an_ellipsis() -> None:
    assert excerpt("0123456789abcdefghij", 10) == "'…23456789abcdefgh…'"
    assert excerpt("0123456789abcdefghij", 3) == "'0123456789a…'"


# -- the identity scorer of the corruption set and pressure --------------------------------------------------


def digest(index: int) -> str:
    return f"Summary {index:02d}{'abcdef0123456789' * 2}"


def identity_set(size: int = 4):
    prompts = build_corruption_set(synthetic_corpus(), 2000, "seed", size=size)
    return prompts, [completion(digest(i)) for i in range(size)], [completion(digest(i)) for i in range(size)]


def test_identical_concurrent_and_solo_runs_pass() -> None:
    prompts, concurrent, solo = identity_set()
    result = score_identity_set("corruption set", prompts, concurrent, solo)
    assert result.passed and result.summary == "4/4 requests identical to their solo cold runs, 0 foreign codes"
    assert result.data == {"oracle": "identity", "requests": 4, "identical": 4, "foreign": 0, "prompt_tokens": [2000]}
    assert [c.detail for c in result.checks] == ["identical to its solo cold run"] * 4


def test_a_concurrent_answer_that_differs_from_its_solo_run_stops_naming_the_request_and_the_character() -> None:
    prompts, concurrent, solo = identity_set()
    concurrent[2] = completion(digest(2)[:12])
    result = score_identity_set("corruption set", prompts, concurrent, solo)
    assert result.stop.startswith("incorrect output: request 3 ")
    assert "at character 12 " in result.stop and "'…ary 02ab' vs '…ary 02abcdef0123…'" in result.stop
    assert result.summary == "3/4 requests identical to their solo cold runs, 0 foreign codes"
    assert [c.passed for c in result.checks] == [True, True, False, True]


def test_a_foreign_code_under_concurrency_is_cross_request_corruption_before_any_difference() -> None:
    prompts, concurrent, solo = identity_set()
    concurrent[0] = completion(digest(0)[:5])
    concurrent[1] = completion(f"{digest(1)}, {prompts[3].codes[1]}")
    result = score_identity_set("corruption set", prompts, concurrent, solo)
    assert result.stop.startswith(f"cross-request corruption: request 2 answered with request 4's code {prompts[3].codes[1]} ")
    assert "(1 foreign code(s) in 1 request(s))" in result.stop
    assert result.checks[1].detail == ("differs from its solo cold run at character 42 ('…23456789, NEEDLE…' vs "
                                       f"'…23456789'); foreign {prompts[3].codes[1]} (request 4)")
    assert result.data["foreign"] == 1 and result.data["identical"] == 2


def test_a_missing_own_code_is_no_failure_under_the_identity_oracle() -> None:
    prompts, concurrent, solo = identity_set()
    assert not any(find_codes(c.text) for c in concurrent)
    assert score_identity_set("corruption set", prompts, concurrent, solo).passed


@pytest.mark.parametrize(("which", "label"), [("concurrent", "corruption set request 2 (fresh salt)"),
                                              ("solo", "corruption set request 2 solo (fresh salt)")])
def test_every_concurrent_and_solo_run_must_be_cold(which: str, label: str) -> None:
    prompts, concurrent, solo = identity_set()
    runs = {"concurrent": concurrent, "solo": solo}[which]
    runs[1] = completion(digest(1), cached=384)
    with pytest.raises(ValidationStop) as caught:
        score_identity_set("corruption set", prompts, concurrent, solo)
    assert caught.value.one_line() == f"{label} {LEAK}; fix: {FIX}"


def test_pressure_under_the_identity_oracle_keeps_its_note_and_size() -> None:
    prompts, concurrent, solo = identity_set(2)
    result = score_identity_set("pressure", prompts, concurrent, solo)
    assert result.summary == "2/2 requests identical to their solo cold runs, 0 foreign codes, 2 concurrent 2000-token requests"
    assert "metrics" in result.data["note"]


# -- the identity scorer of the needles ----------------------------------------------------------------------


NEEDLE = build_needle_prompt(synthetic_corpus(), 5048, (1000, 3000), make_needle_codes("n", 2))


def needles(cold: str = "Summary 0123456789", hit: str = "Summary 0123456789", fresh: str = "Summary 0123456789",
            hit_cached: int = 4992, fresh_cached: int = 0, cold_cached: int = 0, hit_tokens: int = 5048):
    return score_needles_identity(NEEDLE, completion(cold, cold_cached, 5048), completion(hit, hit_cached, hit_tokens),
                                  completion(fresh, fresh_cached, 5048), 384)


def test_cold_hit_and_fresh_salt_needle_runs_that_agree_pass() -> None:
    result = needles()
    assert result.passed and result.name == "needles"
    assert result.summary == ("4/4 checks: cold, hit (cached 4992) and fresh-salt runs of a 5048-token prompt with needles "
                              "at 1000, 3000")
    assert result.data["cached_tokens"] == {"cold": 0, "hit": 4992, "fresh_salt": 0}


@pytest.mark.parametrize(("kwargs", "stop"), [
    ({"hit_cached": 0}, "unexpected cached count: the needle prompt's cache hit reported cached_tokens 0, expected 4992"),
    ({"hit_cached": 4608}, "unexpected cached count: the needle prompt's cache hit reported cached_tokens 4608, expected 4992"),
    ({"hit": "Summary 01234"}, "incorrect output: the needle prompt's prefix-cache hit differs from its cold run at "
                               "character 13 ('…ry 01234' vs '…ry 0123456789')"),
    ({"fresh": "yrammuS"}, "incorrect output: the needle prompt under a fresh salt differs from its cold run at "
                           "character 0 ('yrammuS' vs 'Summary …')"),
    ({"hit_tokens": 5049}, "incorrect output: the needle prompt's prompt_tokens cold/hit/fresh-salt [5048, 5049]"),
], ids=["no-hit", "short-hit", "hit-output", "fresh-salt-output", "prompt-length"])
def test_each_needle_identity_failure_has_its_reason(kwargs, stop) -> None:
    category, _, fields = stop.partition(": ")
    got = needles(**kwargs).stop
    assert got.startswith(category + ": ") and all(number in got for number in re.findall(r"\d+", fields))


@pytest.mark.parametrize(("kwargs", "label"), [({"cold_cached": 384}, "needle request (fresh salt)"),
                                               ({"fresh_cached": 384}, "needle fresh-salt request")])
def test_the_cold_and_fresh_salt_needle_runs_must_be_cold(kwargs, label) -> None:
    with pytest.raises(ValidationStop) as caught:
        needles(**kwargs)
    assert caught.value.one_line() == f"{label} {LEAK}; fix: {FIX}"


# -- the choice ----------------------------------------------------------------------------------------------


def test_an_unknown_oracle_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as caught:
        check_oracle("magic")
    assert caught.value.one_line() == ("--oracle 'magic' is not one of auto, recall, identity; "
                                       "fix: pass --oracle auto, recall or identity")
    with pytest.raises(UsageError):
        make_options(PACKED, "salt", "kvbake", None, 8000, 8000, 0, None, "magic")
    assert make_options(PACKED, "salt", "kvbake", None, 8000, 8000, 0, None).oracle == "auto"


def test_a_forced_oracle_is_known_before_any_request_and_auto_is_not() -> None:
    assert [initial_choice(name).text for name in ORACLES] == [
        "not chosen (auto: the run stopped before the recall probe chose one)", "recall (--oracle recall)",
        "identity (--oracle identity)"]
    assert initial_choice("auto") == OracleChoice("auto", None, NOT_CHOSEN)


def test_the_recall_probe_is_short_deterministic_and_holds_one_code_of_its_own() -> None:
    probe = build_probe(synthetic_corpus(), "kvbake")
    assert probe == build_probe(synthetic_corpus(), "kvbake")
    assert probe.codes == make_needle_codes("kvbake:recall probe", 1) and probe.depths == (PROBE_DEPTH,)
    assert estimate_tokens(probe.text) == PROBE_TOKENS == 400
    assert find_codes(probe.text) == probe.codes
    assert not set(probe.codes) & set(make_needle_codes("kvbake:corruption set", 32) + make_needle_codes("kvbake:needles", 2))


def test_the_probe_answer_chooses_recall_only_when_it_holds_the_code() -> None:
    probe = build_probe(synthetic_corpus(), "kvbake")
    code = probe.codes[0]
    recalled = choose_oracle(probe, completion(f"{code}", tokens=400))
    assert recalled == OracleChoice("auto", "recall", RECALLED)
    assert recalled.text == "recall (auto: the recall probe's answer contained its code)"
    not_recalled = choose_oracle(probe, completion("Summary 0123", tokens=400))
    assert not_recalled.text == "identity (auto: the recall probe's answer did not contain its code)"
    assert not_recalled.reason == NOT_RECALLED
    assert choose_oracle(probe, completion(code[:-1], tokens=400)).used == "identity"
    assert probe_data(probe, completion(code, tokens=401), recalled) == {"code": code, "prompt_tokens": 401, "recalled": True}


def test_a_probe_that_reports_cached_tokens_invalidates_the_run() -> None:
    probe = build_probe(synthetic_corpus(), "kvbake")
    with pytest.raises(ValidationStop) as caught:
        choose_oracle(probe, completion(probe.codes[0], cached=384))
    assert caught.value.one_line() == f"recall probe (fresh salt) {LEAK}; fix: {FIX}"


def test_the_report_says_which_oracle_ran_and_why() -> None:
    memory = {"watched": False, "floor_bytes": int(1.5 * GIB), "samples": 0, "lowest_bytes": {}}
    choice = OracleChoice("auto", "identity", NOT_RECALLED)
    report = Report(ChosenPreset(PACKED, None), "http://127.0.0.1:1", "m", {"id": None, "text": "no release record"},
                    "synthetic", "2026-10-23T10:15:00Z", "2026-10-23T10:16:00Z",
                    (score_inertness([completion("x")] * 3, control=False),), memory, "not needed", choice)
    text = report_text(report)
    assert re.search(r"^oracle:   identity \(auto: the recall probe's answer did not contain its code\)$", text, re.MULTILINE)
    data = json.loads(json.dumps(report_to_dict(report)))
    assert data["oracle"] == oracle_to_dict(choice) == {
        "requested": "auto", "used": "identity", "reason": "auto: the recall probe's answer did not contain its code",
        "text": "identity (auto: the recall probe's answer did not contain its code)"}
