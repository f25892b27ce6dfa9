"""validation_run's details the whole-run tests leave open: boundaries, arguments passed on, report layout."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from kvbake.errors import RolloutError, ValidationStop
from kvbake.kvarith.forced_pressure import Limits, Pool, plan_pressure
from kvbake.manifest import Manifest
from kvbake.operate.adapters.memwatch import GIB, NodeMemory
from kvbake.operate.adapters.openai_client import Completion, OpenAIClient
from kvbake.operate.adapters.validation_run import PlanRun, ValidateRequest, memory_reader, release_of, run_validation
from kvbake.operate.core.needle import make_needle_codes
from kvbake.serve.core.presets import choose_preset
from kvbake.operate.core.validate_plan import ANSWER_TOKENS, PlanOptions, make_options, synthetic_corpus
from message_words import says
from tests.doubles.openai_double import Fault, Misbehaviour, OpenAIDouble
from tests.unit.test_validate_pressure import CACHE_INFO, pressure_sent, realserve_like, run_auto, serve_metrics
from tests.unit.test_validate_stops import last_report, manifest, run_plan, standin  # noqa: F401
from tests.unit.test_validation_run_release import MEMINFO, nodes, world  # noqa: F401
from tests.unit.test_validation_run_release import request as validate_request
from fake_fleet import CONTROL, World, deploy


def options_for(manifest: Manifest, preset: str = "packing-327680", **preset_fields: Any) -> PlanOptions:
    """The options of a run with the sizes run_plan gives, then the preset's fields changed."""
    options = make_options(manifest.presets[preset], "mutants", "kvbake", (1000, 3000), 2000, 2000, 2, None)
    return dataclasses.replace(options, preset=dataclasses.replace(options.preset, **preset_fields))


class SpyClient(OpenAIClient):
    """The real client, noting how many threads each set of concurrent requests was given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.workers: list[int] = []

    def complete_many(self, requests: Any, max_workers: int = 16) -> tuple[Completion, ...]:
        self.workers.append(max_workers)
        return super().complete_many(requests, max_workers)


class OverlongTokenizer(OpenAIClient):
    """A client whose server counts every prompt as `length` tokens, however it is resized."""

    length = 4096

    def tokenize(self, prompt: str) -> tuple[int, ...]:
        return (0,) * self.length


@pytest.fixture
def far_east_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The local time zone 14 hours ahead of UTC for one test."""
    monkeypatch.setenv("TZ", "UTC-14")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_report_times_are_utc_whatever_the_local_zone(manifest: Manifest, far_east_clock: None) -> None:
    with OpenAIDouble() as double:
        report, _ = run_plan(manifest, double.url, pressure=0)
    started, finished = (datetime.strptime(t, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc) for t in (report.started, report.finished))
    assert abs(datetime.now(timezone.utc) - started) < timedelta(hours=1) and started <= finished


def test_memory_is_read_inside_the_serving_container_at_the_given_path(world: World, manifest: Manifest) -> None:
    seen: list[tuple[str, tuple[str, ...]]] = []
    for engine in world.engines.values():
        engine.exec_in = lambda container, argv: seen.append((container, tuple(argv))) or MEMINFO
    deployment = nodes(world, ("a", "head"), ("b", "worker"))
    reader = memory_reader(validate_request(manifest, "http://127.0.0.1:9", deployment=deployment, meminfo_path="/host/meminfo"))
    assert [reading.node for reading in reader()] == ["a", "b"]
    assert seen == [("serve", ("cat", "/host/meminfo"))] * 2


def test_damaged_records_on_the_head_are_named_for_the_head(world: World) -> None:
    deploy(world, CONTROL)
    for slot in ("state-a.json", "state-b.json"):
        world.engines["a"].files["kvbake-state"][f"/kvbake/{slot}"] = b"not json"
    with pytest.raises(RolloutError) as caught:
        release_of(nodes(world, ("b", "worker"), ("a", "head")))
    assert says(caught.value.message, "node a")


def test_a_stop_at_the_first_step_still_lists_every_later_step_as_not_run(manifest: Manifest) -> None:
    broken = Misbehaviour(faults=(Fault("status", 503, kind="models"),))
    with OpenAIDouble(faults=broken) as double, pytest.raises(ValidationStop):
        run_plan(manifest, double.url)
    report = last_report(manifest)
    assert len(report["steps"]) == 5 and [s["ran"] for s in report["steps"]] == [True, False, False, False, False]
    assert report["model"] is None, "no model was ever resolved"


def test_a_run_without_pressure_says_the_pressure_step_was_skipped(manifest: Manifest) -> None:
    with OpenAIDouble() as double:
        report, _ = run_plan(manifest, double.url, pressure=0)
    pressure = report.steps[4]
    assert not pressure.ran and says(pressure.summary, "skipped")
    assert not says(pressure.summary, "stopped earlier")


def test_the_json_report_is_indented_by_one_space_with_sorted_keys(manifest: Manifest) -> None:
    with OpenAIDouble() as double:
        _, path = run_plan(manifest, double.url)
    text = path.read_text()
    orders: list[list[str]] = []
    json.loads(text, object_pairs_hook=lambda pairs: orders.append([k for k, _ in pairs]) or dict(pairs))
    assert len(orders[-1]) > 10 and all(keys == sorted(keys) for keys in orders)
    lines = text.splitlines()
    assert lines[0] == "{" and lines[1].startswith(' "') and text.endswith("}\n")


def test_the_prefix_step_runs_before_any_control_output_was_taken(manifest: Manifest) -> None:
    with OpenAIDouble() as double, OpenAIClient(double.url) as client:
        result = PlanRun(client, options_for(manifest), synthetic_corpus()).prefix()
    assert result.ran and result.stop is None


def test_the_prefix_step_expects_cached_counts_in_the_presets_block(manifest: Manifest) -> None:
    preset = dataclasses.replace(manifest.presets["packing-327680"], prefix_block=16)
    manifest = dataclasses.replace(manifest, presets={**manifest.presets, "packing-327680": preset})
    with OpenAIDouble(block=16) as double:
        report, _ = run_plan(manifest, double.url)
    assert report.steps[1].passed


@pytest.mark.parametrize(("room", "fits"), [(0, True), (-1, False)], ids=["exactly-fits", "one-token-over"])
def test_a_prompt_fits_when_it_leaves_exactly_the_answers_tokens(manifest: Manifest, room: int, fits: bool) -> None:
    prompt = "one two three four five six seven eight nine ten " * 40
    with OpenAIDouble() as double, OpenAIClient(double.url) as client:
        max_len = double.count_tokens(prompt) + ANSWER_TOKENS + room
        run = PlanRun(client, options_for(manifest, max_model_len=max_len), synthetic_corpus())
        if fits:
            run.check_fits("needle", [prompt])
            return
        with pytest.raises(ValidationStop) as caught:
            run.check_fits("needle", [prompt])
    assert says(caught.value.message, f"over max-model-len {max_len}")


def test_the_presets_step_limit_shapes_the_derived_requests(manifest: Manifest) -> None:
    manifest = realserve_like(manifest, "--max-num-batched-tokens", "512")
    with OpenAIDouble() as double:
        double.metrics = serve_metrics(double)
        report, _ = run_auto(manifest, double)
        sent = pressure_sent(double)
    plan = plan_pressure(Pool(256, 128), 4096, Limits(step_tokens=512))
    derivation = report.steps[4].data["derivation"]
    assert plan != plan_pressure(Pool(256, 128), 4096)
    assert (derivation["requests"], derivation["max_tokens"]) == (plan.requests, plan.max_tokens)
    assert len(sent) == plan.requests and {body["max_tokens"] for body in sent} == {plan.max_tokens}


def test_the_pressure_prompts_carry_the_codes_of_the_runs_seed(manifest: Manifest) -> None:
    manifest = realserve_like(manifest)
    with OpenAIDouble() as double:
        double.metrics = serve_metrics(double)
        run_auto(manifest, double)
        sent = pressure_sent(double)
    codes = make_needle_codes("kvbake:pressure", 2 * len(sent))
    assert all(code in " ".join(body["prompt"] for body in sent) for code in codes)


def test_prompts_the_server_measures_too_long_for_any_answer_stop_before_sending(manifest: Manifest) -> None:
    manifest = realserve_like(manifest)
    options = dataclasses.replace(options_for(manifest), pressure="auto")
    with OpenAIDouble() as double, OverlongTokenizer(double.url) as client:
        double.metrics = lambda: CACHE_INFO
        with pytest.raises(ValidationStop) as caught:
            PlanRun(client, options, synthetic_corpus()).forced_pressure()
        assert double.counts["completion"] == 0
    assert says(caught.value.message, "measure 4096 to 4096 tokens") and says(caught.value.message, "KV pool of 256 blocks")
    assert says(caught.value.fix, "--pressure N --pressure-tokens T")


def test_a_serve_without_metrics_takes_the_pool_the_preset_fixes(manifest: Manifest) -> None:
    manifest = realserve_like(manifest, "--num-gpu-blocks-override", "128")
    with OpenAIDouble() as double, OpenAIClient(double.url) as client:
        run = PlanRun(client, options_for(manifest), synthetic_corpus())
        assert run.kv_pool() == (Pool(128, 128), "--num-gpu-blocks-override")


def test_the_needle_prompt_starts_at_the_fourth_record(manifest: Manifest) -> None:
    with OpenAIDouble() as double:
        run_plan(manifest, double.url)
        (needle,) = [body["prompt"] for body in double.received if str(body["cache_salt"]).endswith("-needles")]
    assert needle.startswith(synthetic_corpus().documents[3].text)


def test_the_corruption_set_lets_the_model_stop_at_its_end_of_text(manifest: Manifest) -> None:
    with OpenAIDouble() as double:
        run_plan(manifest, double.url)
        corruption = [body for body in double.received if "corruption set" in str(body["cache_salt"])]
    assert len(corruption) == 16 and not any(body.get("ignore_eos") for body in corruption)


def test_a_set_larger_than_the_default_thread_pool_is_sent_with_a_thread_each(manifest: Manifest) -> None:
    with OpenAIDouble() as double, SpyClient(double.url) as client:
        result = PlanRun(client, options_for(manifest), synthetic_corpus()).needle_set("pressure", 2000, 20)
    assert result.ran and client.workers == [20]


def test_every_request_is_salted_with_the_start_time_and_eight_random_hex_digits(manifest: Manifest) -> None:
    with OpenAIDouble() as double:
        report, _ = run_plan(manifest, double.url, pressure=0)
        salts = {str(body["cache_salt"]) for body in double.received}
    prefix = re.compile(rf"kvbake-{re.escape(report.started)}-[0-9a-f]{{8}}-[a-z]")
    assert len(salts) > 10 and all(prefix.match(salt) for salt in salts)


def test_a_model_given_on_the_command_line_is_used_without_asking_the_serve(manifest: Manifest) -> None:
    with OpenAIDouble(model="served-model") as double:
        report, _ = run_validation(validate_request(manifest, double.url, model="served-model"))
        assert double.counts["models"] == 0 and double.counts["completion"] > 0
    assert report.model == "served-model"


def test_a_breach_seen_between_samples_cuts_the_request_in_flight(manifest: Manifest) -> None:
    """The fifth completion (the prefix step's cold request) is held for 2 s; the watcher's own thread sees the node
    low meanwhile and closes the client, so the prefix step's four later requests are never sent."""
    held = Misbehaviour(faults=(Fault("delay", 2.0, request=5),))
    with OpenAIDouble(faults=held) as double:
        def reader() -> list[NodeMemory]:
            return [NodeMemory("spark-b", (1 if double.counts["completion"] >= 5 else 8) * GIB)]

        request = ValidateRequest(manifest, choose_preset(manifest, "packing-327680"), double.url, depths=(1000, 3000),
                                  prefix_tokens=2000, corruption_tokens=2000, mem_interval_s=0.01, timeout_s=60)
        with pytest.raises(ValidationStop) as caught:
            run_validation(request, reader=reader)
        assert double.counts["completion"] == 5
    assert says(caught.value.message, "memory floor") and last_report(manifest)["stop"]["step"] == "prefix identity"


def test_the_report_names_the_oracle_the_recall_probe_chose(manifest: Manifest) -> None:
    with OpenAIDouble() as double:
        _, path = run_plan(manifest, double.url, pressure=0)
    oracle = json.loads(path.read_text())["oracle"]
    assert (oracle["requested"], oracle["used"]) == ("auto", "recall")


def test_the_report_names_the_oracle_the_command_line_forced(manifest: Manifest) -> None:
    with OpenAIDouble() as double:
        _, path = run_plan(manifest, double.url, pressure=0, oracle="recall")
    assert json.loads(path.read_text())["oracle"]["requested"] == "recall"
