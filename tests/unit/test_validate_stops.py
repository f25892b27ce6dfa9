"""Every stop reason of the supervised test plan, driven in-process against the OpenAI test double.

Each case injects one fault into one request (or one kind of request) and asserts the exact stop reason, the
exit code, the step it stopped at, that no later step ran and how many requests reached the double.
Request numbers of a run under the recall oracle (completions): 1-3 inertness, 4 the recall probe (auto sends it
once the first step's checks passed; the default double recalls, so auto picks recall), 5 cold, 6 hit, 7 fresh
salt, 8 partial, 9 partial control, 10-25 corruption set, 26 needles, 27-28 pressure (with two pressure requests).
Requests sent together are all sent, even after one of them failed, so every count is exact.
The identity oracle's stops are in tests/unit/test_validate_oracle.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from kvbake.errors import ValidationStop
from kvbake.manifest import Manifest, load_manifest
from kvbake.operate.adapters.memwatch import GIB, NodeMemory
from kvbake.operate.core.needle import make_needle_codes
from kvbake.operate.core.prefix_identity import (
    build_prefix_prompts, expected_cached_tokens, partial_prefix_cached_tokens, shared_prefix_length,
)
from kvbake.serve.core.presets import choose_preset
from kvbake.operate.core.validate_plan import synthetic_corpus
from kvbake.operate.adapters.validation_run import ValidateRequest, run_validation
from tests.doubles.double_text import token_ids
from tests.doubles.openai_double import Fault, Misbehaviour, OpenAIDouble

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin" / "manifest.yaml"
CORRUPTION_CODES = make_needle_codes("kvbake:corruption set", 32)
NEEDLE_CODES = make_needle_codes("kvbake:needles", 2)
PRESSURE_CODES = make_needle_codes("kvbake:pressure", 4)
LEAK = "reported 384 cached tokens instead of 0, so cache hits leak across salts and this run is invalid"


@pytest.fixture(scope="module")
def standin() -> Manifest:
    return load_manifest(STANDIN)


@pytest.fixture
def manifest(standin: Manifest, tmp_path: Path) -> Manifest:
    """The stand-in manifest, placed in a private folder so the reports land there."""
    return dataclasses.replace(standin, path=tmp_path / "manifest.yaml")


def run_plan(manifest: Manifest, url: str, preset: str = "packing-327680", pressure: int | str = 2,
             timeout_s: float = 30.0, reader: Any = None, oracle: str = "auto", depths: Any = (1000, 3000), **sizes: int) -> Any:
    request = ValidateRequest(manifest, choose_preset(manifest, preset), url, depths=depths, prefix_tokens=2000,
                              corruption_tokens=sizes.get("corruption_tokens", 2000), pressure=pressure,
                              pressure_tokens=sizes.get("pressure_tokens"), mem_interval_s=0, timeout_s=timeout_s,
                              oracle=oracle)
    return run_validation(request, reader=reader)


def last_report(manifest: Manifest) -> dict[str, Any]:
    """The one report of the test's one run."""
    (path,) = (manifest.root / ".kvbake" / "validate").glob("*.json")
    return json.loads(path.read_text())


def stop_of(manifest: Manifest, double: OpenAIDouble, **kwargs: Any) -> tuple[ValidationStop, dict[str, Any]]:
    with pytest.raises(ValidationStop) as caught:
        run_plan(manifest, double.url, **kwargs)
    assert type(caught.value) is ValidationStop and caught.value.exit_code == 15
    return caught.value, last_report(manifest)


def assert_stopped_at(report: dict[str, Any], step: str) -> None:
    """The named step stopped; every earlier step passed; no later step ran."""
    names = [s["name"] for s in report["steps"]]
    at = names.index(step)
    assert report["outcome"] == "stopped" and report["stop"]["step"] == step
    assert [s["passed"] for s in report["steps"][:at]] == [True] * at
    assert [s["ran"] for s in report["steps"][at + 1 :]] == [False] * (len(names) - at - 1)
    assert all(s["summary"] == "not run: the run stopped earlier" for s in report["steps"][at + 1 :])


def completion(effect: str, value: Any = None, **selector: Any) -> Misbehaviour:
    return Misbehaviour(faults=(Fault(effect, value, **selector),))


# (faults, preset, step, start of the stop reason, completions that reached the double)
CASES = {
    "inertness-leaking-salt": (completion("cached_tokens", 384, request=2), "control", "inertness",
                               f"inertness fresh-salt request 2 {LEAK}", 3),
    "inertness-nondeterministic": (completion("truncate", request=3), "control", "inertness",
                                   "incorrect output: identical outputs: distance 0.", 3),
    "baseline-prompt-length": (completion("prompt_tokens", 1, request=2), "packing-327680", "baseline",
                               "incorrect output: same prompt: prompt_tokens [2000, 2001]", 3),
    "models-empty": (Misbehaviour(faults=(Fault("empty", kind="models"),)), "packing-327680", "baseline",
                     "/v1/models lists no model", 0),
    "models-http-503": (Misbehaviour(faults=(Fault("status", 503, kind="models"),)), "packing-327680", "baseline",
                        "/v1/models answered HTTP 503", 0),
    "prefix-cold-count": (completion("cached_tokens", 384, request=5), "packing-327680", "prefix identity",
                          "unexpected cached count: cold cached tokens: cached_tokens 384, expected 0", 9),
    "prefix-hit-count": (completion("cached_tokens", 0, request=6), "packing-327680", "prefix identity",
                         "unexpected cached count: hit cached tokens: cached_tokens 0, expected 1920", 9),
    "prefix-hit-output": (completion("truncate", request=6), "packing-327680", "prefix identity",
                          "incorrect output: hit output: distance 0.", 9),
    "prefix-fresh-salt-leak": (completion("cached_tokens", 384, request=7), "packing-327680", "prefix identity",
                               f"fresh-salt control {LEAK}", 9),
    "prefix-partial-count": (completion("cached_tokens", 0, request=8), "packing-327680", "prefix identity",
                             "unexpected cached count: partial-prefix cached tokens: cached_tokens 0, expected 768", 9),
    "prefix-partial-output": (completion("empty", request=8), "packing-327680", "prefix identity",
                              "incorrect output: partial-prefix output: distance 1.000000", 9),
    "prefix-partial-control-leak": (completion("cached_tokens", 384, request=9), "packing-327680", "prefix identity",
                                    f"partial-prefix fresh-salt control {LEAK}", 9),
    "prefix-prompt-length": (completion("prompt_tokens", -1, request=6), "packing-327680", "prefix identity",
                             "incorrect output: same prompt: prompt_tokens cold/hit/fresh-salt [1999, 2000]", 9),
    "tokenize-http-503": (Misbehaviour(faults=(Fault("status", 503, kind="tokenize", request=2),)), "packing-327680",
                          "prefix identity", "/tokenize answered HTTP 503", 7),
    "tokenize-no-tokens": (Misbehaviour(faults=(Fault("drop_tokens", kind="tokenize"),)), "packing-327680",
                           "prefix identity", "/tokenize returned an unexpected body: no tokens list", 7),
    "corruption-foreign-code": (completion("code", CORRUPTION_CODES[10], salt_suffix="corruption set-0"),
                                "packing-327680", "corruption set",
                                f"cross-request corruption: request 1 answered with request 6's code {CORRUPTION_CODES[10]} "
                                "(1 foreign code(s) in 1 request(s))", 25),
    "corruption-truncated": (completion("truncate", salt_suffix="corruption set-4"), "packing-327680", "corruption set",
                             f"incorrect output: request 5: missing {CORRUPTION_CODES[9]}", 25),
    "corruption-empty": (completion("empty", salt_suffix="corruption set-7"), "packing-327680", "corruption set",
                         f"incorrect output: request 8: missing {CORRUPTION_CODES[14]}, {CORRUPTION_CODES[15]}", 25),
    "corruption-unknown-code": (completion("code", "NEEDLE-0000-0000", salt_suffix="corruption set-15"),
                                "packing-327680", "corruption set",
                                f"incorrect output: request 16: missing {CORRUPTION_CODES[31]}; "
                                "unknown NEEDLE-0000-0000 (not a failure)", 25),
    "corruption-leaking-salt": (completion("cached_tokens", 384, salt_suffix="corruption set-2"), "packing-327680",
                                "corruption set", f"corruption set request 3 (fresh salt) {LEAK}", 25),
    "needles-wrong-code": (completion("code", "NEEDLE-0000-0000", salt_suffix="-needles"), "packing-327680", "needles",
                           f"incorrect output: needle at 3000: {NEEDLE_CODES[1]} at token 3000 (estimate)", 26),
    "needles-truncated": (completion("truncate", request=26), "packing-327680", "needles",
                          f"incorrect output: needle at 3000: {NEEDLE_CODES[1]} at token 3000 (estimate)", 26),
    "needles-empty": (completion("empty", salt_suffix="-needles"), "packing-327680", "needles",
                      f"incorrect output: needle at 1000: {NEEDLE_CODES[0]} at token 1000 (estimate)", 26),
    "needles-leaking-salt": (completion("cached_tokens", 384, salt_suffix="-needles"), "packing-327680", "needles",
                             f"needle request (fresh salt) {LEAK}", 26),
    "needles-no-details": (completion("drop_details", salt_suffix="-needles"), "packing-327680", "needles",
                           "/v1/completions returned an unexpected body: usage.prompt_tokens_details.cached_tokens is "
                           "missing", 26),
    "needles-invalid-json": (completion("invalid_json", request=26), "packing-327680", "needles",
                             "/v1/completions returned an unexpected body: not JSON", 26),
    "needles-http-500": (completion("status", 500, prompt_tokens=5048), "packing-327680", "needles",
                         "/v1/completions answered HTTP 500: ", 26),
    "pressure-foreign-code": (completion("code", PRESSURE_CODES[0], salt_suffix="pressure-1"), "packing-327680",
                              "pressure", f"cross-request corruption: request 2 answered with request 1's code "
                              f"{PRESSURE_CODES[0]} (1 foreign code(s) in 1 request(s))", 28),
    "pressure-truncated": (completion("truncate", salt_suffix="pressure-0"), "packing-327680", "pressure",
                           f"incorrect output: request 1: missing {PRESSURE_CODES[1]}", 28),
    "pressure-leaking-salt": (completion("cached_tokens", 384, salt_suffix="pressure-1"), "packing-327680", "pressure",
                              f"pressure request 2 (fresh salt) {LEAK}", 28),
    "pressure-http-502": (completion("status", 502, salt_suffix="pressure-0"), "packing-327680", "pressure",
                          "/v1/completions answered HTTP 502: ", 28),
}


@pytest.mark.parametrize(("faults", "preset", "step", "reason", "sent"), list(CASES.values()), ids=list(CASES))
def test_each_fault_stops_the_plan_at_its_step(manifest, faults, preset, step, reason, sent):
    with OpenAIDouble(faults=faults) as double:
        err, report = stop_of(manifest, double, preset=preset)
        counts = double.counts
    expected = f"{double.url}{reason}" if reason.startswith("/") else reason
    assert report["stop"]["reason"].startswith(expected)
    assert err.message.startswith(f"{step}: {expected}") and "; report .kvbake/validate/" in err.message
    assert_stopped_at(report, step)
    assert counts["completion"] == sent


def test_a_timeout_stops_the_needle_step_and_skips_pressure(manifest):
    faults = completion("delay", 60, salt_suffix="-needles")
    with OpenAIDouble(faults=faults) as double:
        err, report = stop_of(manifest, double, timeout_s=0.5)
        assert double.counts["completion"] == 26
    assert f"needles: cannot reach {double.url}/v1/completions: ReadTimeout" in err.message
    assert "start the serve" in (err.fix or "")
    assert_stopped_at(report, "needles")


def test_the_memory_floor_stops_the_needle_step(manifest):
    readings = iter([8, 8, 8, 8, 8, 8, 1])  # two samples a step: the seventh is taken before the needles
    reader = lambda: [NodeMemory("spark-b", next(readings) * GIB)]  # noqa: E731 - a one-line fake
    with OpenAIDouble() as double:
        err, report = stop_of(manifest, double, reader=reader)
        assert double.counts["completion"] == 25
    assert err.message.startswith("needles: memory floor: MemAvailable below 1.50 GiB on spark-b 1.00 GiB")
    assert_stopped_at(report, "needles")


def test_an_unreachable_endpoint_stops_the_first_step(manifest):
    with OpenAIDouble() as closed:
        url = closed.url
    with pytest.raises(ValidationStop) as caught:
        run_plan(manifest, url)
    assert caught.value.message.startswith(f"baseline: cannot reach {url}/v1/models: ConnectError")
    assert_stopped_at(last_report(manifest), "baseline")


@pytest.mark.parametrize("tokenizer", ["estimate", "words", "long-words"])
def test_a_clean_run_reads_every_length_from_the_server(manifest, tokenizer):
    prompts = build_prefix_prompts(synthetic_corpus(), 2000, 1000)
    with OpenAIDouble(tokenizer=tokenizer) as double:
        report, _ = run_plan(manifest, double.url)
        assert double.counts["completion"] == 28
    full, partial = token_ids(prompts.full, tokenizer), token_ids(prompts.partial, tokenizer)
    n, m = len(full), shared_prefix_length(full, partial)
    assert {"estimate": n == 2000, "words": n > 2200, "long-words": n < 1800}[tokenizer], n
    assert [s.passed for s in report.steps] == [True] * 5
    prefix = report.steps[1].data
    assert (prefix["prompt_tokens"], prefix["shared_tokens"]) == (n, m)
    assert prefix["cached_tokens"] == {"cold": 0, "hit": expected_cached_tokens(n), "fresh_salt": 0,
                                       "partial": partial_prefix_cached_tokens(m, len(partial))}
    assert report.steps[0].data["prompt_tokens"] == n


def small_preset(manifest: Manifest, max_model_len: int) -> Manifest:
    """The stand-in manifest with its packing preset cut to a small max-model-len."""
    preset = dataclasses.replace(manifest.presets["packing-327680"], max_model_len=max_model_len)
    return dataclasses.replace(manifest, presets={**manifest.presets, "packing-327680": preset})


@pytest.mark.parametrize(("max_model_len", "sizes", "step", "sent"), [
    (6000, {}, "needles", 25),
    (8000, {"corruption_tokens": 7900}, "corruption set", 9),
    (8000, {"pressure_tokens": 7900}, "pressure", 26),
], ids=["needle", "corruption-tokens", "pressure-tokens"])
def test_a_prompt_the_estimate_fits_but_the_server_does_not_stops_before_it_is_sent(manifest, max_model_len, sizes,
                                                                                    step, sent):
    manifest = small_preset(manifest, max_model_len)
    with OpenAIDouble(tokenizer="words", max_model_len=max_model_len) as double:
        err, report = stop_of(manifest, double, **sizes)
        assert double.counts["completion"] == sent
    what = {"needles": "needle"}.get(step, step)
    estimated = sizes.get("corruption_tokens") or sizes.get("pressure_tokens") or 5048
    assert err.message.startswith(f"{step}: the {what} prompt is ")
    assert (f"tokens by the server's tokenizer ({estimated} estimated), over max-model-len {max_model_len} less 64 "
            "for the answer") in err.message
    assert "pass smaller --depths, --corruption-tokens or --pressure-tokens" in (err.fix or "")
    assert_stopped_at(report, step)


class Probe:
    """A readiness endpoint on loopback: answers each status in turn (then keeps the last), and notes how many requests
    the validation endpoint had received at each probe."""

    def __init__(self, statuses: list[int], double: OpenAIDouble) -> None:
        import http.server
        import threading

        self.statuses, self.seen = list(statuses), []
        probe = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                probe.seen.append(sum(double.counts.values()))
                status = probe.statuses.pop(0) if len(probe.statuses) > 1 else probe.statuses[0]
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/health"

    def __enter__(self) -> "Probe":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def unused_loopback_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/health"


def deployment_with(tmp_path: Path, readiness: Any) -> Any:
    from kvbake.deployfile import Deployment, Launcher, Node

    return Deployment(tmp_path / "deploy.yaml", (Node("spark-a", "unix:///a", "head"), Node("spark-b", "unix:///b", "worker")),
                      Launcher(("launch",), "serve", 10), 900, readiness=readiness)


def run_deployed(manifest: Manifest, url: str, deployment: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """run_plan with --deploy: the head's release record and the memory readings come from fakes, not engines."""
    import kvbake.operate.adapters.validation_run as validating

    monkeypatch.setattr(validating, "release_of", lambda deployment: {"id": None, "text": "no release record (fake)"})
    request = ValidateRequest(manifest, choose_preset(manifest, "control"), url, depths=(1000, 3000), prefix_tokens=2000,
                              corruption_tokens=2000, deployment=deployment, mem_interval_s=0)
    return run_validation(request, reader=lambda: [NodeMemory("spark-a", 8 * GIB)])


def test_validate_with_a_deployment_whose_serve_never_gets_ready_stops_before_any_request(manifest, tmp_path, monkeypatch):
    from kvbake.deployfile import Readiness

    url = unused_loopback_url()
    with OpenAIDouble() as double:
        with pytest.raises(ValidationStop) as caught:
            run_deployed(manifest, double.url, deployment_with(tmp_path, Readiness(url, 200, 0.3, 0.05)), monkeypatch)
        assert double.counts == {"completion": 0, "tokenize": 0, "models": 0}
    assert type(caught.value) is ValidationStop and caught.value.exit_code == 15
    assert caught.value.one_line() == (f"not started: the serve never became ready: GET {url} answered no answer (ConnectError), not 200, "
                                       "within 0.3 s; fix: deploy the preset (python build.py deploy) and validate once it is ready")
    assert not (manifest.root / ".kvbake").exists(), "no report: the plan never started"


def test_validate_with_a_deployment_waits_for_the_readiness_probe_before_the_first_request(manifest, tmp_path, monkeypatch):
    from kvbake.deployfile import Readiness

    with OpenAIDouble() as double, Probe([503, 503, 200], double) as probe:
        report, _ = run_deployed(manifest, double.url, deployment_with(tmp_path, Readiness(probe.url, 200, 30, 0.05)), monkeypatch)
        assert double.counts["completion"] > 0
    assert probe.seen == [0, 0, 0], "three probes (503, 503, 200), all before the first request to the endpoint"
    assert report.stop is None


def test_an_endpoint_or_model_that_carries_a_credential_is_refused_before_any_request(manifest):
    from kvbake.errors import IntegrityError

    with OpenAIDouble() as double:
        host = double.url.split("://", 1)[1]
        for endpoint, model, option, kind in ((f"http://ops:hunter22@{host}", None, "--endpoint", "URL userinfo"),
                                              (double.url, "tiny?api_key=hunter22", "--model", "a password or token query pair")):
            request = ValidateRequest(manifest, choose_preset(manifest, "control"), endpoint, model=model)
            with pytest.raises(IntegrityError) as caught:
                run_validation(request)
            assert caught.value.one_line() == (f"{option} holds {kind}, which would be written in clear into the validation report; fix: "
                                               f"give {option} without it (the plan sends no credentials); nothing was sent or written")
        assert double.counts == {"completion": 0, "tokenize": 0, "models": 0}
    assert not (manifest.root / ".kvbake").exists()
