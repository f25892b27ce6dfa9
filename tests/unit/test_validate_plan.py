"""Tests of the pure test plan (options, filler, step scorers, stop reasons, report) and the memory watcher's rules."""

from __future__ import annotations

import json

import pytest

from kvbake.errors import KvbakeError, PresetError, ValidationStop
from kvbake.manifest import Preset
from kvbake.operate.adapters.memwatch import GIB, MemoryWatcher, NodeMemory, parse_mem_available
from kvbake.operate.core.needle import NEEDLE_PATTERN, build_corruption_set, build_needle_prompt, make_needle_codes
from kvbake.operate.core.completions import Completion
from kvbake.operate.core.prefix_identity import Observation, PrefixObservations
from kvbake.serve.core.presets import ChosenPreset
from kvbake.operate.core.validate_plan import (
    NEEDLE_TAIL, Report, make_options, not_run, parse_depths, report_text, report_to_dict, score_inertness,
    score_needle_set, score_needles, score_prefix, stopped, synthetic_corpus,
)

CONTROL = Preset("control", "validated", 163840, {}, "all off", 384, ())
PACKED = Preset("packing-327680", "validated", 327680, {"VLLM_DSV41_KV_PAIR": "3"}, "packing", 384, ())


def options(preset: Preset = PACKED, depths: tuple[int, ...] | None = None, prefix: int = 8000, pressure: int = 0):
    return make_options(preset, "salt", "kvbake", depths, prefix, 8000, pressure, None)


def test_synthetic_filler_is_deterministic_varied_and_free_of_codes() -> None:
    first, second = synthetic_corpus(), synthetic_corpus()
    assert first == second
    texts = [doc.text for doc in first.documents]
    assert len(set(texts)) == len(texts) and first.total_chars > 50_000
    assert not any(NEEDLE_PATTERN.search(text) for text in texts)


def test_depths_parse_sorted_and_refuse_garbage() -> None:
    assert parse_depths("500000,450000") == (450000, 500000)
    assert parse_depths(None) is None
    for bad, why in (("abc", "list of token counts"), ("", "non-negative token counts"), ("-5", "non-negative token counts")):
        with pytest.raises(KvbakeError) as caught:
            parse_depths(bad)
        assert caught.value.exit_code == 2
        assert all(field in caught.value.message for field in ("--depths", repr(bad), why)), caught.value.message
        assert "--depths 450000,500000" in caught.value.fix


def test_default_depths_lie_inside_max_model_len() -> None:
    plan = options(CONTROL)
    assert plan.control and len(plan.depths) == 2
    assert plan.depths[-1] < plan.needle_tokens < CONTROL.max_model_len
    assert plan.pressure_tokens == plan.needle_tokens


def test_requested_depths_set_the_needle_prompt_and_must_fit() -> None:
    plan = make_options(Preset("held", "held", 524288, {"A": "1"}, "n", 384, ()), "s", "k", (450000, 500000), 8000, 8000, 0, None)
    assert not plan.control and plan.needle_tokens == 500000 + NEEDLE_TAIL
    with pytest.raises(PresetError) as depths:
        options(PACKED, depths=(450000, 500000))
    assert depths.value.exit_code == 14
    assert all(field in depths.value.message for field in ("packing-327680", "max-model-len 327680", "needle depth 450000",
                                                            "needle depth 500000"))
    assert "327616 tokens" in depths.value.fix
    with pytest.raises(PresetError) as prefix:
        options(PACKED, prefix=400000)
    assert prefix.value.exit_code == 14
    assert all(field in prefix.value.message for field in ("packing-327680", "max-model-len 327680", "--prefix-tokens 400000"))
    assert "needle depth" not in prefix.value.message
    assert "327616 tokens" in prefix.value.fix


def completion(text: str, cached: int = 0, tokens: int = 8000) -> Completion:
    return Completion(text=text, prompt_tokens=tokens, cached_tokens=cached)


def test_inertness_passes_identical_uncached_outputs() -> None:
    result = score_inertness([completion("same")] * 3, control=True)
    assert result.passed and result.name == "inertness" and result.data["floor"] == 0.0


def test_inertness_of_the_control_stops_on_different_outputs_but_a_candidate_records_its_floor() -> None:
    runs = [completion("same"), completion("same"), completion("other")]
    result = score_inertness(runs, control=True)
    assert result.stop.startswith("incorrect output: identical outputs")
    baseline = score_inertness(runs, control=False)
    assert baseline.passed and baseline.name == "baseline" and baseline.data["floor"] > 0


def test_a_fresh_salt_reporting_hits_invalidates_the_run() -> None:
    with pytest.raises(ValidationStop) as caught:
        score_inertness([completion("same"), completion("same", cached=7680)], control=True)
    assert caught.value.exit_code == 15
    assert all(field in caught.value.message for field in ("inertness", "fresh-salt request 2", "7680 cached tokens", "invalid"))
    assert "cache_salt" in caught.value.fix


def observations(hit_cached: int = 7680, partial_cached: int = 3840, hit_text: str = "out") -> PrefixObservations:
    return PrefixObservations(Observation(8000, 0, "out"), Observation(8000, hit_cached, hit_text), Observation(8000, 0, "out"),
                              Observation(8000, partial_cached, "part"), Observation(8000, 0, "part"), 4000, ("out",), 384)


def test_prefix_step_passes_exact_counts_and_names_a_wrong_one() -> None:
    assert score_prefix(observations()).passed
    wrong = score_prefix(observations(hit_cached=7296)).stop
    assert wrong.startswith("unexpected cached count: hit ") and "7296" in wrong and "7680" in wrong
    assert score_prefix(observations(partial_cached=384)).stop.startswith("unexpected cached count: partial-prefix")
    assert score_prefix(observations(hit_text="tuo")).stop.startswith("incorrect output: hit output")


def corruption_set():
    prompts = build_corruption_set(synthetic_corpus(), 2000, "seed", size=4)
    return prompts, [completion(", ".join(p.codes), tokens=2000) for p in prompts]


def test_corruption_step_names_the_foreign_code_and_its_owner() -> None:
    prompts, answers = corruption_set()
    assert score_needle_set("corruption set", prompts, answers).passed
    answers[1] = completion(answers[1].text + ", " + prompts[3].codes[0])
    result = score_needle_set("corruption set", prompts, answers)
    assert result.stop.startswith(f"cross-request corruption: request 2 answered with request 4's code {prompts[3].codes[0]}")
    assert result.data["passed"] == 3


def test_corruption_step_stops_on_a_missing_code_and_ignores_an_unknown_one() -> None:
    prompts, answers = corruption_set()
    answers[0] = completion(prompts[0].codes[0] + ", NEEDLE-0000-0000")
    result = score_needle_set("corruption set", prompts, answers)
    assert result.stop.startswith(f"incorrect output: request 1: missing {prompts[0].codes[1]}")
    assert "unknown NEEDLE-0000-0000 (not a failure)" in result.stop


def test_pressure_records_that_preemption_is_read_elsewhere() -> None:
    prompts, answers = corruption_set()
    result = score_needle_set("pressure", prompts, answers)
    assert result.passed and "metrics" in result.data["note"]


def test_needles_step_needs_every_code_back() -> None:
    codes = make_needle_codes("n", 2)
    prompt = build_needle_prompt(synthetic_corpus(), 4000, (1000, 3000), codes)
    assert score_needles(prompt, completion(", ".join(codes), tokens=4000)).passed
    missing = score_needles(prompt, completion(codes[0], tokens=4000)).stop
    assert missing.startswith("incorrect output: needle at 3000: ") and codes[1] in missing and codes[0] not in missing


def report(steps) -> Report:
    memory = {"watched": True, "floor_bytes": int(1.5 * GIB), "samples": 3, "lowest_bytes": {"spark-a": 4 * GIB}}
    return Report(ChosenPreset(PACKED, None), "http://127.0.0.1:1", "m", {"id": None, "text": "no release record"}, "synthetic",
                  "2026-10-23T10:15:00Z", "2026-10-23T10:16:00Z", tuple(steps), memory, "not requested")


def test_report_names_the_stop_and_the_steps_that_did_not_run() -> None:
    steps = [score_inertness([completion("x")] * 3, control=False), stopped("prefix identity", "memory floor: low", "restore"),
             not_run("corruption set", "not run: the run stopped earlier")]
    data = json.loads(json.dumps(report_to_dict(report(steps))))
    assert data["outcome"] == "stopped" and data["stop"] == {"step": "prefix identity", "reason": "memory floor: low", "fix": "restore"}
    assert [s["ran"] for s in data["steps"]] == [True, True, False]
    text = report_text(report(steps))
    assert "STOPPED at prefix identity: memory floor: low" in text and "spark-a 4.00 GiB" in text
    assert report(steps).name == "20261023T101500Z-packing-327680"


def test_meminfo_parsing() -> None:
    assert parse_mem_available("MemTotal: 100 kB\nMemAvailable:    2048 kB\n") == 2 * 1024 * 1024
    assert parse_mem_available("MemTotal: 100 kB\n") is None


def test_watcher_stops_below_the_floor_once_and_keeps_the_lowest_reading() -> None:
    readings = iter([[NodeMemory("a", 4 * GIB), NodeMemory("b", 3 * GIB)], [NodeMemory("a", 2 * GIB), NodeMemory("b", GIB)]])
    breaches = []
    watcher = MemoryWatcher(lambda: next(readings), int(1.5 * GIB), on_breach=lambda: breaches.append(1))
    watcher.sample()
    for _ in range(2):
        with pytest.raises(ValidationStop) as caught:
            watcher.sample()
        assert caught.value.exit_code == 15
        assert all(field in caught.value.message for field in ("memory floor", "MemAvailable", "1.50 GiB", "on b 1.00 GiB"))
        assert "base serve" in caught.value.fix
    assert breaches == [1] and watcher.lowest == {"a": 2 * GIB, "b": GIB} and watcher.samples == 2


def test_an_unreadable_node_stops_the_run() -> None:
    def unreadable():
        raise ValidationStop("node b: cannot read MemAvailable", "start it")

    watcher = MemoryWatcher(unreadable, GIB)
    with pytest.raises(ValidationStop) as caught:
        watcher.sample()
    assert caught.value.exit_code == 15
    assert "node b" in caught.value.message and "MemAvailable" in caught.value.message and "start it" in caught.value.fix
    assert watcher.stop_reason is not None
