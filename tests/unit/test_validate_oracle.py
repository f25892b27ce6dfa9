"""The oracle of the supervised plan, driven in-process against the OpenAI test double: the choice and every stop.

The double either recalls (it answers with the needle codes it finds) or, with `cannot_recall`, answers with a
digest of the prompt, as a small random-weight model would. Request numbers of a run under the identity oracle
(completions, with two pressure requests): 1-3 inertness, 4 the recall probe, 5-9 prefix identity, 10-25 the
corruption set sent together, 26-41 each of its prompts alone, 42 needles cold, 43 needles hit, 44 needles under a
fresh salt, 45-46 pressure sent together, 47-48 each pressure prompt alone. With --oracle given there is no probe.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from kvbake.cli import main, parse_args
from kvbake.errors import UsageError
from kvbake.operate.core.needle import make_needle_codes
from kvbake.operate.core.oracle import ORACLES, RECALLED, OracleChoice
from tests.doubles.openai_double import Fault, Misbehaviour, OpenAIDouble, answer_text
from tests.unit.usage_errors import usage_parts
from tests.unit.test_validate_stops import (  # noqa: F401 - the fixtures are used by name
    CORRUPTION_CODES, LEAK, PRESSURE_CODES, STANDIN, assert_stopped_at, last_report, manifest, run_plan, standin, stop_of,
)

PROBE_CODE = make_needle_codes("kvbake:recall probe", 1)[0]
SALT = re.compile(r"^kvbake-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ-[0-9a-f]{8}-(?P<label>.+)$")
IDENTITY_AUTO = "identity (auto: the recall probe's answer did not contain its code)"
Received = tuple[dict[str, Any], ...]


def labels(received: Received) -> list[str]:
    """The salt label of every completion, in arrival order (e.g. 'inert-0', 'corruption set-solo-3')."""
    return [SALT.match(body["cache_salt"]).group("label") for body in received]


def answer(received: Received, label: str) -> str:
    """What the double answers, when it cannot recall, to the prompt sent under this salt label."""
    prompt = next(body["prompt"] for body in received if labels((body,)) == [label])
    return answer_text(prompt, 0, Misbehaviour(cannot_recall=True))


def cannot_recall(*faults: Fault, **fields: Any) -> Misbehaviour:
    return Misbehaviour(cannot_recall=True, faults=faults, **fields)


def test_auto_picks_recall_on_a_double_that_recalls(manifest) -> None:
    with OpenAIDouble() as double:
        report, _ = run_plan(manifest, double.url)
        sent = labels(double.received)
    assert report.oracle == OracleChoice("auto", "recall", RECALLED)
    data = last_report(manifest)
    assert data["oracle"]["text"] == "recall (auto: the recall probe's answer contained its code)"
    assert data["steps"][0]["data"]["recall_probe"] == {"code": PROBE_CODE, "prompt_tokens": 400, "recalled": True}
    assert sent[:5] == ["inert-0", "inert-1", "inert-2", "recall-probe", "prefix"] and len(sent) == 28
    assert sent[25:] == ["needles", "pressure-0", "pressure-1"] or sent[25:] == ["needles", "pressure-1", "pressure-0"]
    assert [step["data"].get("oracle") for step in data["steps"][2:]] == [None, None, None]


def test_auto_picks_identity_and_the_whole_plan_passes_on_a_double_that_cannot_recall(manifest) -> None:
    with OpenAIDouble(faults=cannot_recall()) as double:
        report, _ = run_plan(manifest, double.url)
        received = double.received
    sent = labels(received)
    assert sent[:9] == ["inert-0", "inert-1", "inert-2", "recall-probe", "prefix", "prefix", "prefix-fresh", "prefix",
                        "partial-fresh"]
    assert sorted(sent[9:25]) == sorted(f"corruption set-{i}" for i in range(16))
    assert sent[25:41] == [f"corruption set-solo-{i}" for i in range(16)]
    assert sent[41:44] == ["needles", "needles", "needles-fresh"]
    assert sorted(sent[44:46]) == ["pressure-0", "pressure-1"] and sent[46:] == ["pressure-solo-0", "pressure-solo-1"]
    assert {body["temperature"] for body in received} == {0}
    assert [s.passed for s in report.steps] == [True] * 5 and report.oracle.text == IDENTITY_AUTO
    assert [s.summary for s in report.steps[2:]] == [
        "16/16 requests identical to their solo cold runs, 0 foreign codes",
        "4/4 checks: cold, hit (cached 4992) and fresh-salt runs of a 5048-token prompt with needles at 1000, 3000",
        "2/2 requests identical to their solo cold runs, 0 foreign codes, 2 concurrent 5048-token requests; "
        "preemptions not counted (the serve exposes no vllm:num_preemptions_total)"]
    data = last_report(manifest)
    assert data["outcome"] == "passed" and data["oracle"]["used"] == "identity"
    assert data["steps"][0]["data"]["recall_probe"] == {"code": PROBE_CODE, "prompt_tokens": 400, "recalled": False}
    assert data["steps"][3]["data"]["cached_tokens"] == {"cold": 0, "hit": 4992, "fresh_salt": 0}
    text = next((manifest.root / ".kvbake" / "validate").glob("*.txt")).read_text()
    assert f"\noracle:   {IDENTITY_AUTO}\n" in text


@pytest.mark.parametrize(("faults", "oracle", "sent", "text"), [
    (Misbehaviour(), "recall", 27, "recall (--oracle recall)"),
    (cannot_recall(), "identity", 47, "identity (--oracle identity)"),
    (Misbehaviour(), "identity", 47, "identity (--oracle identity)"),
], ids=["recall-on-a-recalling-double", "identity-on-a-double-that-cannot-recall", "identity-on-a-recalling-double"])
def test_a_forced_oracle_sends_no_probe_and_says_it_was_forced(manifest, faults, oracle, sent, text) -> None:
    with OpenAIDouble(faults=faults) as double:
        report, _ = run_plan(manifest, double.url, oracle=oracle)
        received = double.received
    assert len(received) == sent and "recall-probe" not in labels(received)
    assert [s.passed for s in report.steps] == [True] * 5 and report.oracle.text == text
    assert "recall_probe" not in last_report(manifest)["steps"][0]["data"]


def test_forcing_recall_on_a_double_that_cannot_recall_stops_at_the_corruption_set(manifest) -> None:
    with OpenAIDouble(faults=cannot_recall()) as double:
        err, report = stop_of(manifest, double, oracle="recall")
        assert double.counts["completion"] == 24
    reason = f"incorrect output: request 1: missing {CORRUPTION_CODES[0]}, {CORRUPTION_CODES[1]}"
    assert report["stop"]["reason"] == reason and err.message.startswith(f"corruption set: {reason}; report .kvbake/validate/")
    assert_stopped_at(report, "corruption set")
    assert report["oracle"]["text"] == "recall (--oracle recall)"


def test_a_double_that_drops_the_last_code_fails_the_one_code_probe_so_only_forced_recall_stops(manifest) -> None:
    with OpenAIDouble(faults=Misbehaviour(omit_last_code=True)) as double:
        report, _ = run_plan(manifest, double.url)
    assert [s.passed for s in report.steps] == [True] * 5 and report.oracle.text == IDENTITY_AUTO
    shutil.rmtree(manifest.root / ".kvbake")
    with OpenAIDouble(faults=Misbehaviour(omit_last_code=True)) as double:
        _, data = stop_of(manifest, double, oracle="recall")
    assert data["stop"]["reason"] == f"incorrect output: request 1: missing {CORRUPTION_CODES[1]}"


def truncated_at_20(label: str, sentence: str) -> Callable[[Received], str]:
    """The reason for an answer the double cut in half (its digest answers are 40 characters long)."""
    def reason(received: Received) -> str:
        full = answer(received, label)
        return f"incorrect output: {sentence} at character 20 ('…{full[12:20]}' vs '…{full[12:28]}…')"
    return reason


def emptied(label: str, sentence: str) -> Callable[[Received], str]:
    def reason(received: Received) -> str:
        return f"incorrect output: {sentence} at character 0 ('' vs '{answer(received, label)[:8]}…')"
    return reason


def fixed(text: str) -> Callable[[Received], str]:
    return lambda received: text


# (faults, step, the exact stop reason from what the double received, completions that reached the double)
STOPS = {
    "probe-leaking-salt": (cannot_recall(Fault("cached_tokens", 384, salt_suffix="-recall-probe")), "baseline",
                           fixed(f"recall probe (fresh salt) {LEAK}"), 4),
    "prefix-corrupt-hits": (cannot_recall(corrupt_hits=True), "prefix identity",
                            fixed("incorrect output: hit output: distance 0.875000 (first divergence at 0), floor 0.000000"), 9),
    "corruption-differs-in-a-batch": (cannot_recall(Fault("truncate", batched=True, prompt_contains=CORRUPTION_CODES[12]),
                                                    batch=16, batch_wait_s=0.5, batch_salt=r"-corruption set-\d+$"), "corruption set",
                                      truncated_at_20("corruption set-solo-6", "request 7 under concurrency differs from "
                                                      "its solo cold run"), 41),
    "corruption-foreign-code": (cannot_recall(Fault("code", CORRUPTION_CODES[10], salt_suffix="-corruption set-0")),
                                "corruption set", fixed(f"cross-request corruption: request 1 answered with request 6's "
                                                        f"code {CORRUPTION_CODES[10]} (1 foreign code(s) in 1 request(s))"), 41),
    "corruption-leaking-salt": (cannot_recall(Fault("cached_tokens", 384, salt_suffix="-corruption set-2")),
                                "corruption set", fixed(f"corruption set request 3 (fresh salt) {LEAK}"), 41),
    "corruption-solo-leaking-salt": (cannot_recall(Fault("cached_tokens", 384, salt_suffix="-corruption set-solo-2")),
                                     "corruption set", fixed(f"corruption set request 3 solo (fresh salt) {LEAK}"), 41),
    "needles-hit-differs": (cannot_recall(Fault("truncate", request=43)), "needles",
                            truncated_at_20("needles", "the needle prompt's prefix-cache hit differs from its cold run"), 44),
    "needles-no-hit": (cannot_recall(Fault("cached_tokens", 0, request=43)), "needles",
                       fixed("unexpected cached count: the needle prompt's cache hit reported cached_tokens 0, expected 4992"),
                       44),
    "needles-prompt-length": (cannot_recall(Fault("prompt_tokens", 1, request=43)), "needles",
                              fixed("incorrect output: the needle prompt's prompt_tokens cold/hit/fresh-salt [5048, 5049]"), 44),
    "needles-fresh-salt-differs": (cannot_recall(Fault("empty", salt_suffix="-needles-fresh")), "needles",
                                   emptied("needles", "the needle prompt under a fresh salt differs from its cold run"), 44),
    "needles-cold-leaking-salt": (cannot_recall(Fault("cached_tokens", 384, request=42)), "needles",
                                  fixed(f"needle request (fresh salt) {LEAK}"), 44),
    "needles-fresh-leaking-salt": (cannot_recall(Fault("cached_tokens", 384, salt_suffix="-needles-fresh")), "needles",
                                   fixed(f"needle fresh-salt request {LEAK}"), 44),
    "pressure-differs-in-a-batch": (cannot_recall(Fault("empty", batched=True, prompt_contains=PRESSURE_CODES[2]), batch=2,
                                                  batch_salt=r"-pressure-\d+$"),
                                    "pressure", emptied("pressure-solo-1", "request 2 under concurrency differs from its "
                                                        "solo cold run"), 48),
    "pressure-foreign-code": (cannot_recall(Fault("code", PRESSURE_CODES[0], salt_suffix="-pressure-1")), "pressure",
                              fixed(f"cross-request corruption: request 2 answered with request 1's code {PRESSURE_CODES[0]} "
                                    "(1 foreign code(s) in 1 request(s))"), 48),
}


@pytest.mark.parametrize(("faults", "step", "reason", "sent"), list(STOPS.values()), ids=list(STOPS))
def test_each_identity_stop_has_its_reason_its_step_and_its_request_count(manifest, faults, step, reason, sent) -> None:
    with OpenAIDouble(faults=faults) as double:
        err, report = stop_of(manifest, double)
        received = double.received
    expected = reason(received)
    assert report["stop"]["reason"] == expected
    assert re.fullmatch(rf"{re.escape(f'{step}: {expected}; report .kvbake/validate/')}[0-9TZ]+-packing-327680\.txt",
                        err.message), err.message
    assert_stopped_at(report, step)
    assert len(received) == sent
    chosen = "not chosen (auto: the run stopped before the recall probe chose one)" if step == "baseline" else IDENTITY_AUTO
    assert report["oracle"]["text"] == chosen


def test_the_command_line_offers_every_oracle_the_plan_knows_and_defaults_to_auto() -> None:
    argv = ["validate", "--preset", "control", "--endpoint", "http://127.0.0.1:9"]
    assert parse_args(argv).oracle == "auto"
    assert [parse_args([*argv, "--oracle", name]).oracle for name in ORACLES] == list(ORACLES)


def test_an_unknown_oracle_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["validate", "--preset", "control", "--endpoint", "http://127.0.0.1:9", "--oracle", "magic"]
    assert main(argv) == UsageError.exit_code == 2
    cause, fix = usage_parts(capsys.readouterr().err)
    assert cause.startswith("argument --oracle: ") and all(name in cause for name in ("'magic'", "'auto'", "'recall'", "'identity'"))
    assert fix.endswith(" validate --help")


def test_validate_on_the_command_line_reports_the_oracle_it_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(STANDIN.parent, tmp_path / "standin")
    with OpenAIDouble(faults=cannot_recall()) as double:
        code = main(["validate", "--manifest", str(tmp_path / "standin" / "manifest.yaml"), "--preset", "packing-327680",
                     "--endpoint", double.url, "--depths", "1000,3000", "--prefix-tokens", "2000", "--corruption-tokens",
                     "2000", "--mem-interval", "0", "--oracle", "identity", "--json"])
        assert len(double.received) == 43
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["outcome"] == "passed" and data["oracle"] == {
        "requested": "identity", "used": "identity", "reason": "--oracle identity", "text": "identity (--oracle identity)"}
