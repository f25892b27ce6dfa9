"""Tests of the OpenAI client against the loopback test double: block-rule cache counts, needles and faults."""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbake.operate.core.corpus import Corpus, Document, estimate_tokens
from kvbake.errors import ValidationStop
from kvbake.operate.core.needle import build_corruption_set, build_needle_prompt, find_codes, make_needle_codes, score_corruption
from kvbake.operate.adapters.openai_client import CompletionRequest, OpenAIClient, completion_payload, parse_completion
from kvbake.operate.core.prefix_identity import (
    Observation,
    PrefixObservations,
    build_prefix_prompts,
    expected_cached_tokens,
    partial_prefix_cached_tokens,
    score_prefix_sequence,
    shared_prefix_length,
)
from kvbake.operate.core.validate_plan import synthetic_corpus
from tests.doubles.double_faults import BatchGate, Fault, fault_from_json
from tests.doubles.double_text import TOKENIZERS, find_needle_codes, token_pieces
from tests.doubles.openai_double import DEFAULT_MODEL, Misbehaviour, OpenAIDouble

CORPUS = Corpus(
    (
        Document("opinions_cl.jsonl", 1, "The appellate court affirmed the judgment below. " * 4),
        Document("filings_recap.jsonl", 1, "Motion to dismiss filed by the defendant. " * 4),
    )
)


@pytest.fixture
def double() -> Iterator[OpenAIDouble]:
    with OpenAIDouble() as running:
        yield running


@pytest.fixture
def client(double: OpenAIDouble) -> Iterator[OpenAIClient]:
    with OpenAIClient(double.url, timeout_s=10.0) as opened:
        yield opened


def _observe(client: OpenAIClient, prompt: str, salt: str) -> Observation:
    done = client.complete(CompletionRequest(prompt=prompt, max_tokens=64, cache_salt=salt))
    return Observation(done.prompt_tokens, done.cached_tokens, done.text)


def _prefix_run(client: OpenAIClient, n: int = 2000, shared: int = 900) -> PrefixObservations:
    """Cold, hit and fresh-salt on the full prompt, then the partial prompt under the cold salt and a new one."""
    prompts = build_prefix_prompts(CORPUS, n, shared)
    m = shared_prefix_length(client.tokenize(prompts.full), client.tokenize(prompts.partial))
    return PrefixObservations(
        cold=_observe(client, prompts.full, "salt-a"),
        hit=_observe(client, prompts.full, "salt-a"),
        fresh_salt=_observe(client, prompts.full, "salt-b"),
        partial=_observe(client, prompts.partial, "salt-a"),
        partial_control=_observe(client, prompts.partial, "salt-c"),
        shared_tokens=m,
    )


def _post(url: str, body: object) -> tuple[int, dict[str, object]]:
    """POST JSON with the standard library, so control calls stay independent of the client under test."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10.0) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _control(client: OpenAIClient, **faults: object) -> dict[str, object]:
    status, body = _post(f"{client.base_url}/control/misbehave", faults)
    assert status == 200
    return body


def test_model_is_discovered(client: OpenAIClient) -> None:
    assert client.models() == (DEFAULT_MODEL,)
    assert client.resolve_model() == DEFAULT_MODEL


def test_request_is_greedy_and_carries_the_salt(double: OpenAIDouble, client: OpenAIClient) -> None:
    client.complete(CompletionRequest(prompt="Hello there.", max_tokens=5, cache_salt="s1"))
    client.complete(CompletionRequest(prompt="Hello there."))
    first, second = double.received
    assert first == {"model": DEFAULT_MODEL, "prompt": "Hello there.", "max_tokens": 5, "temperature": 0,
                     "cache_salt": "s1"}
    assert "cache_salt" not in second


@pytest.mark.parametrize(("n", "cached"), [(384, 0), (385, 384), (769, 768), (2000, 1920)])
def test_repeat_reports_the_block_rule(client: OpenAIClient, n: int, cached: int) -> None:
    request = CompletionRequest(prompt="abcd" * n, cache_salt=f"salt-{n}")
    first, again = client.complete(request), client.complete(request)
    assert (first.prompt_tokens, first.cached_tokens) == (n, 0)
    assert again.cached_tokens == cached == expected_cached_tokens(n)


def test_correct_server_passes_the_prefix_sequence(client: OpenAIClient) -> None:
    obs = _prefix_run(client)
    assert obs.shared_tokens == 900
    assert (obs.cold.cached_tokens, obs.hit.cached_tokens, obs.fresh_salt.cached_tokens) == (0, 1920, 0)
    assert obs.partial is not None and obs.partial.cached_tokens == partial_prefix_cached_tokens(900, 2000) == 768
    verdict = score_prefix_sequence(obs)
    assert verdict.passed, verdict.failures


def test_wrong_cached_count_fails_the_count_checks(double: OpenAIDouble, client: OpenAIClient) -> None:
    double.faults = Misbehaviour(cached_tokens_offset=-384)
    failed = [check.name for check in score_prefix_sequence(_prefix_run(client)).failures]
    assert failed == ["hit cached tokens", "partial-prefix cached tokens"]


def test_corrupted_hits_fail_the_output_checks(client: OpenAIClient) -> None:
    _control(client, corrupt_hits=True)
    failed = [check.name for check in score_prefix_sequence(_prefix_run(client)).failures]
    assert failed == ["hit output", "partial-prefix output"]


def test_cache_leaking_across_salts_stops_the_run(client: OpenAIClient) -> None:
    assert _control(client, ignore_salt=True)["ignore_salt"] is True
    with pytest.raises(ValidationStop, match="fresh-salt control reported 1920 cached tokens"):
        score_prefix_sequence(_prefix_run(client))


def _corruption_answers(client: OpenAIClient) -> tuple[tuple[tuple[str, ...], str], ...]:
    prompts = build_corruption_set(CORPUS, 1500, seed="double")
    requests = [CompletionRequest(prompt=p.text, max_tokens=64, cache_salt=f"r{i}") for i, p in enumerate(prompts)]
    done = client.complete_many(requests, max_workers=16)
    return tuple((prompt.codes, completion.text) for prompt, completion in zip(prompts, done))


def test_sixteen_concurrent_requests_each_get_their_own_codes(client: OpenAIClient) -> None:
    pairs = _corruption_answers(client)
    assert [answer for _, answer in pairs] == [", ".join(codes) for codes, _ in pairs]
    assert score_corruption(pairs).passed_count == 16


def test_injected_foreign_code_fails_every_other_request(double: OpenAIDouble, client: OpenAIClient) -> None:
    owner_codes = build_corruption_set(CORPUS, 1500, seed="double")[3].codes
    double.faults = Misbehaviour(foreign_code=owner_codes[0])
    verdict = score_corruption(_corruption_answers(client))
    assert verdict.passed_count == 1
    assert [v.index for v in verdict.requests if v.passed] == [3]
    assert all(v.foreign == (owner_codes[0],) for v in verdict.requests if not v.passed)


def test_dropped_code_is_reported_missing(double: OpenAIDouble, client: OpenAIClient) -> None:
    double.faults = Misbehaviour(omit_last_code=True)
    verdict = score_corruption(_corruption_answers(client))
    assert verdict.passed_count == 0
    assert all(len(v.missing) == 1 and not v.foreign for v in verdict.requests)


def test_http_500_becomes_a_validation_stop_naming_the_url(double: OpenAIDouble, client: OpenAIClient) -> None:
    _control(client, fail_status=500)
    with pytest.raises(ValidationStop) as caught:
        client.complete(CompletionRequest(prompt="Hello there."))
    assert f"{double.url}/v1/completions answered HTTP 500" in caught.value.message
    assert caught.value.exit_code == 15


def test_unreachable_server_becomes_a_validation_stop() -> None:
    with OpenAIDouble() as stopped:
        url = stopped.url
    with OpenAIClient(url, model=DEFAULT_MODEL, timeout_s=5.0) as client, pytest.raises(ValidationStop) as caught:
        client.complete(CompletionRequest(prompt="Hello there."))
    assert f"cannot reach {url}/v1/completions" in caught.value.message
    assert "start the serve" in (caught.value.fix or "")


def test_control_endpoint_refuses_unknown_faults_and_reset_clears_cache(client: OpenAIClient) -> None:
    status, body = _post(f"{client.base_url}/control/misbehave", {"explode": True})
    assert (status, body["code"]) == (400, 400)
    request = CompletionRequest(prompt="abcd" * 800, cache_salt="keep")
    client.complete(request)
    _control(client, cached_tokens_offset=5)
    assert client.complete(request).cached_tokens == 768 + 5
    status, faults = _post(f"{client.base_url}/control/reset", {})
    assert (status, faults["cached_tokens_offset"]) == (200, 0)
    assert client.complete(request).cached_tokens == 0


def test_unknown_model_is_a_validation_stop(double: OpenAIDouble) -> None:
    with OpenAIClient(double.url, model="other-model", timeout_s=10.0) as client:
        with pytest.raises(ValidationStop) as caught:
            client.complete(CompletionRequest(prompt="Hello there."))
    assert caught.value.exit_code == 15
    assert all(field in caught.value.message for field in (f"{double.url}/v1/completions", "HTTP 404", "model 'other-model'"))
    assert "serve log" in caught.value.fix


def test_payload_leaves_out_an_unset_salt() -> None:
    payload = completion_payload("m", CompletionRequest(prompt="p", max_tokens=3))
    assert payload == {"model": "m", "prompt": "p", "max_tokens": 3, "temperature": 0}


def test_payload_asks_for_every_token_only_when_told() -> None:
    payload = completion_payload("m", CompletionRequest(prompt="p", max_tokens=300, ignore_eos=True))
    assert payload == {"model": "m", "prompt": "p", "max_tokens": 300, "temperature": 0, "ignore_eos": True}


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_concurrent_requests_are_all_sent_and_the_first_failure_in_order_is_raised(double: OpenAIDouble,
                                                                                    client: OpenAIClient, workers: int) -> None:
    double.faults = Misbehaviour(faults=(Fault("status", 502, salt_suffix="-0"), Fault("status", 503, salt_suffix="-2")))
    requests = [CompletionRequest(prompt=f"Prompt {i}.", cache_salt=f"s-{i}") for i in range(4)]
    with pytest.raises(ValidationStop) as caught:
        client.complete_many(requests, max_workers=workers)
    assert caught.value.exit_code == 15 and " answered HTTP 502: " in caught.value.message
    assert sorted(body["cache_salt"] for body in double.received) == ["s-0", "s-1", "s-2", "s-3"]


@pytest.mark.parametrize(
    "body",
    [
        {"choices": [{"text": "x"}], "usage": {"prompt_tokens": 3}},
        {"choices": [{"text": "x"}], "usage": {"prompt_tokens": 3, "prompt_tokens_details": None}},
        {"choices": [], "usage": {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 0}}},
        {"choices": [{"text": 5}], "usage": {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 0}}},
        ["not", "an", "object"],
    ],
)
def test_bodies_without_the_counts_are_refused(body: object) -> None:
    with pytest.raises(ValidationStop) as caught:
        parse_completion(body, "http://127.0.0.1:1/v1/completions")
    assert "http://127.0.0.1:1/v1/completions returned an unexpected body" in caught.value.message
    assert "--enable-prompt-tokens-details" in (caught.value.fix or "")


def test_parse_completion_reads_text_and_counts() -> None:
    body = {"choices": [{"text": "hi"}], "usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 4}}}
    done = parse_completion(body, "u")
    assert (done.text, done.prompt_tokens, done.cached_tokens) == ("hi", 9, 4)


NEEDLE_PROMPT = build_needle_prompt(synthetic_corpus(), 5000, (1000, 3000), make_needle_codes("ratio", 2)).text


@pytest.mark.parametrize(("tokenizer", "low", "high"), [("estimate", 1.0, 1.0), ("words", 1.1, 1.3),
                                                         ("long-words", 0.7, 0.9)])
def test_each_tokenizer_counts_its_own_way(tokenizer: str, low: float, high: float) -> None:
    ratio = len(token_pieces(NEEDLE_PROMPT, tokenizer)) / estimate_tokens(NEEDLE_PROMPT)
    assert low <= ratio <= high, ratio
    assert token_pieces(NEEDLE_PROMPT, tokenizer) == token_pieces(NEEDLE_PROMPT, tokenizer)


def test_the_double_reports_its_own_token_count_and_refuses_past_max_model_len() -> None:
    with OpenAIDouble(tokenizer="words", max_model_len=6000) as double, \
            OpenAIClient(double.url, timeout_s=10.0) as client:
        done = client.complete(CompletionRequest(prompt=NEEDLE_PROMPT[:12000], cache_salt="w"))
        assert done.prompt_tokens == double.count_tokens(NEEDLE_PROMPT[:12000]) != estimate_tokens(NEEDLE_PROMPT[:12000])
        assert len(client.tokenize(NEEDLE_PROMPT[:12000])) == done.prompt_tokens
        with pytest.raises(ValidationStop, match="answered HTTP 400: .*maximum context length is 6000 tokens"):
            client.complete(CompletionRequest(prompt=NEEDLE_PROMPT))


def test_the_code_rule_skips_the_placeholder_and_lower_case() -> None:
    text = "NEEDLE-XXXX-XXXX NEEDLE-7F3A-19C2. NEEDLE-7f3a-19c2 NEEDLE-0000-AAAA NEEDLE-7F3A-19C2 NEEDLE-12"
    assert find_needle_codes(text) == ("NEEDLE-7F3A-19C2", "NEEDLE-0000-AAAA")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("NEDL-0123456789ABCDEFXabf \n.,"), max_size=120))
def test_the_code_rule_agrees_with_kvbakes_pattern(text: str) -> None:
    assert find_needle_codes(text) == find_codes(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.sampled_from(sorted(TOKENIZERS)))
def test_every_tokenizer_splits_text_into_pieces_that_join_back(text: str, tokenizer: str) -> None:
    pieces = token_pieces(text, tokenizer)
    assert "".join(pieces) == text and all(pieces)


def test_a_fault_hits_only_the_requests_it_selects(double: OpenAIDouble, client: OpenAIClient) -> None:
    double.faults = Misbehaviour(faults=(Fault("cached_tokens", 7, request=2), Fault("empty", salt_suffix="-b"),
                                         Fault("prompt_tokens", 5, prompt_tokens=3)))
    done = [client.complete(CompletionRequest(prompt=p, cache_salt=salt))
            for p, salt in (("Hello there.", "x-a"), ("Hello there.", "x-a"), ("Hello there.", "x-b"), ("abcdefghijklmnopq", "y"))]
    assert [d.cached_tokens for d in done] == [0, 7, 0, 0]
    assert [d.text == "" for d in done] == [False, False, True, False]
    assert [d.prompt_tokens for d in done] == [8, 8, 8, 5]
    assert double.counts == {"completion": 4, "tokenize": 0, "models": 1}


def test_a_wrong_code_replaces_the_last_own_code(double: OpenAIDouble, client: OpenAIClient) -> None:
    codes = make_needle_codes("wrong", 2)
    prompt = build_needle_prompt(CORPUS, 1000, (100, 600), codes).text
    double.faults = Misbehaviour(faults=(Fault("code", "NEEDLE-0000-0000"),))
    assert client.complete(CompletionRequest(prompt=prompt)).text == f"{codes[0]}, NEEDLE-0000-0000"
    double.faults = Misbehaviour(faults=(Fault("truncate"),))
    assert client.complete(CompletionRequest(prompt=prompt)).text == f"{codes[0]},"


def test_a_double_that_cannot_recall_answers_a_digest_of_each_prompt(double: OpenAIDouble, client: OpenAIClient) -> None:
    codes = make_needle_codes("recall", 2)
    prompts = [build_needle_prompt(CORPUS, 1000, (100, 600), codes, start=start).text for start in (0, 1)]
    double.faults = Misbehaviour(cannot_recall=True)
    answers = [client.complete(CompletionRequest(prompt=p)).text for p in (*prompts, prompts[0])]
    assert answers[0] == "Summary " + hashlib.sha256(prompts[0].encode()).hexdigest()[:32] == answers[2]
    assert answers[1] != answers[0] and not any(find_codes(a) for a in answers)
    double.faults = Misbehaviour(cannot_recall=True, faults=(Fault("code", codes[1]),))
    assert client.complete(CompletionRequest(prompt=prompts[0])).text == codes[1]


def test_a_batched_fault_hits_only_completions_sent_together(double: OpenAIDouble, client: OpenAIClient) -> None:
    double.faults = Misbehaviour(batch=2, faults=(Fault("empty", batched=True, prompt_contains="two"),
                                                  Fault("truncate", batched=False, prompt_contains="one")))
    together = client.complete_many([CompletionRequest(prompt=p) for p in ("Prompt one.", "Prompt two.")], max_workers=2)
    alone = [client.complete(CompletionRequest(prompt=p)) for p in ("Prompt one.", "Prompt two.")]
    digests = ["Summary " + hashlib.sha256(p.encode()).hexdigest()[:32] for p in ("Prompt one.", "Prompt two.")]
    assert [c.text for c in together] == [digests[0], ""]
    assert [c.text for c in alone] == [digests[0][:20], digests[1]]


def test_the_batch_gate_releases_a_full_batch_together_and_a_lone_completion_after_its_wait() -> None:
    gate = BatchGate()
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(lambda _: gate.hold(4, 5.0), range(4))) == [True] * 4
    started = time.monotonic()
    assert gate.hold(4, 0.05) is False and time.monotonic() - started >= 0.05
    assert gate.hold(1, 5.0) is False


@pytest.mark.parametrize(("body", "message"), [
    ({"effect": "empty", "batched": 1}, "batched 1 must be true or false, and only for completions"),
    ({"effect": "drop_tokens", "kind": "tokenize", "batched": True}, "batched True must be true or false, and only for completions"),
    ({"effect": "empty", "prompt_contains": ""}, "prompt_contains '' must be a non-empty text"),
])
def test_the_new_selectors_refuse_bad_values(body: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        fault_from_json(body)
    assert message in str(caught.value)


@pytest.mark.parametrize(("fault", "message"), [
    (Fault("invalid_json"), "/v1/completions returned an unexpected body: not JSON"),
    (Fault("drop_details"), "usage.prompt_tokens_details.cached_tokens is missing"),
    (Fault("status", 429), "/v1/completions answered HTTP 429: "),
    (Fault("drop_tokens", kind="tokenize"), "/tokenize returned an unexpected body: no tokens list"),
    (Fault("invalid_json", kind="tokenize"), "/tokenize returned an unexpected body: not JSON"),
])
def test_a_body_fault_becomes_a_validation_stop(double: OpenAIDouble, client: OpenAIClient, fault: Fault,
                                                  message: str) -> None:
    double.faults = Misbehaviour(faults=(fault,))
    call = client.tokenize if fault.kind == "tokenize" else (lambda p: client.complete(CompletionRequest(prompt=p)))
    with pytest.raises(ValidationStop) as caught:
        call("Hello there.")
    assert message in caught.value.message and caught.value.exit_code == 15


def test_a_delay_past_the_client_timeout_is_a_read_timeout_stop(double: OpenAIDouble) -> None:
    double.faults = Misbehaviour(faults=(Fault("delay", 60.0, kind="models"),))
    with OpenAIClient(double.url, timeout_s=0.2) as client, pytest.raises(ValidationStop) as caught:
        client.resolve_model()
    assert caught.value.exit_code == 15
    assert f"{double.url}/v1/models" in caught.value.message and "ReadTimeout" in caught.value.message


def test_faults_set_at_runtime_are_checked_and_reset_clears_them(client: OpenAIClient) -> None:
    body = _control(client, faults=[{"effect": "status", "value": 503, "kind": "tokenize", "request": 1}])
    assert body["faults"] == [{"effect": "status", "value": 503, "kind": "tokenize", "request": 1,
                               "salt_suffix": None, "prompt_tokens": None, "prompt_contains": None, "batched": None}]
    with pytest.raises(ValidationStop, match="/tokenize answered HTTP 503"):
        client.tokenize("Hello there.")
    assert client.tokenize("Hello there.") == client.tokenize("Hello there.")
    for bad, fragment in [([{"effect": "explode"}], "effect 'explode' does not apply to completion requests"),
                          ([{"effect": "drop_tokens"}], "effect 'drop_tokens' does not apply to completion requests"),
                          ([{"effect": "status"}], "effect 'status' needs a value of type int"),
                          ([{"effect": "empty", "value": 3}], "effect 'empty' takes no value"),
                          ([{"effect": "empty", "request": 0}], "request 0 must be a request number from 1"),
                          ([{"value": 3}], "a fault is an object with 'effect'"), ("nope", "faults must be a list")]:
        status, answer = _post(f"{client.base_url}/control/misbehave", {"faults": bad})
        assert (status, fragment in answer["message"]) == (400, True), answer
    status, cleared = _post(f"{client.base_url}/control/reset", {})
    assert (status, cleared["faults"]) == (200, [])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["effect", "value", "kind", "request", "salt_suffix", "prompt_tokens",
                                        "prompt_contains", "batched", "x"]),
                       st.one_of(st.none(), st.booleans(), st.integers(-3, 600), st.floats(allow_nan=False),
                                 st.sampled_from(["status", "delay", "empty", "code", "tokenize", "models", "-b"]),
                                 st.lists(st.integers(), max_size=2))))
def test_a_fault_from_json_is_a_fault_or_a_value_error(body: dict) -> None:
    try:
        fault = fault_from_json(body)
    except ValueError as err:
        assert str(err) and "\n" not in str(err)
    else:
        assert isinstance(fault, Fault)


def test_the_batch_gate_holds_only_the_completions_its_salt_pattern_finds() -> None:
    only_the_set = Misbehaviour(batch=16, batch_salt=r"-corruption set-\d+$")
    assert only_the_set.holds("kvbake-x-corruption set-3")
    assert not only_the_set.holds("kvbake-x-corruption set-solo-3") and not only_the_set.holds(None)
    assert Misbehaviour(batch=2).holds(None) and Misbehaviour(batch=2).holds("any")
    assert not Misbehaviour().holds("any"), "no batch: nothing is held"
