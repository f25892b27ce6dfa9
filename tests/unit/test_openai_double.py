"""Tests of the OpenAI client against the loopback test double: block-rule cache counts, needles and faults."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from kvbake.corpus import Corpus, Document
from kvbake.errors import ValidationStop
from kvbake.needle import build_corruption_set, score_corruption
from kvbake.openai_client import CompletionRequest, OpenAIClient, completion_payload, parse_completion
from kvbake.prefix_identity import (
    Observation,
    PrefixObservations,
    build_prefix_prompts,
    expected_cached_tokens,
    partial_prefix_cached_tokens,
    score_prefix_sequence,
    shared_prefix_length,
)
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
        with pytest.raises(ValidationStop, match="HTTP 404"):
            client.complete(CompletionRequest(prompt="Hello there."))


def test_payload_leaves_out_an_unset_salt() -> None:
    payload = completion_payload("m", CompletionRequest(prompt="p", max_tokens=3))
    assert payload == {"model": "m", "prompt": "p", "max_tokens": 3, "temperature": 0}


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
