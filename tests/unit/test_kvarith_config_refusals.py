"""kv_arith's config reader: every refusal names the field or file and says what to do; the family and the wrappers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.errors import KvArithError
from kvbake.kvarith.config import V4, V41, load_config, parse_config, read_config_json
from kvbake.kvarith.examples import v4_flash_config, v41_flash_config
from tests.unit.message_words import says


def refusal(call, *args) -> KvArithError:
    with pytest.raises(KvArithError) as caught:
        call(*args)
    assert caught.value.exit_code == 17
    return caught.value


V41_CHANGES = [
    ({"model_type": "mamba"}, "unknown model type 'mamba'", "kv_arith covers DeepSeek-V4-Flash and DeepSeek-V4.1-Flash configs only"),
    ({"head_dim": 256}, "field 'head_dim' is 256", "vLLM's DeepSeek-V4 cache needs head_dim 512"),
    ({"qk_rope_head_dim": 32}, "field 'qk_rope_head_dim' is 32", "vLLM's DeepSeek-V4 record needs 64"),
    ({"num_hidden_layers": 44}, "field 'compress_ratios' has 43 entries but num_hidden_layers is 44",
     "give one compress ratio per layer"),
    ({"compress_ratios": [0, 0] + [2] * 18 + [4] * 20}, "field 'compress_ratios' has 4 at layer 20",
     "check that the config belongs to this model"),
    ({"kv_source_layer_ids": []}, "field 'kv_source_layer_ids' is empty", "copy it from the model's config.json"),
    ({"index_source_layer_ids": [2, 2]}, "field 'index_source_layer_ids' lists a layer twice", "list each layer once"),
    ({"kv_source_layer_ids": [2, 40]}, "field 'kv_source_layer_ids' lists layer 40 outside 0..39", "fix the layer list"),
    ({"kv_source_layer_ids": [-1, 2]}, "field 'kv_source_layer_ids' lists layer -1 outside 0..39", "fix the layer list"),
    ({"kv_source_layer_ids": [0, 2]}, "field 'kv_source_layer_ids' lists layer 0, whose compress_ratios entry is 0",
     "a source layer must be a compressed layer"),
    ({"kv_source_layer_ids": [8, 14]}, "field 'kv_source_layer_ids' starts at 8 but layer 2 is compressed",
     "every compressed layer needs a kv source at or below it"),
    ({"sliding_window": 0}, "field 'sliding_window' is 0, not a positive integer", "fix the config value"),
    ({"sliding_window": True}, "field 'sliding_window' is True, not a positive integer", "fix the config value"),
    ({"num_nextn_predict_layers": -1}, "field 'num_nextn_predict_layers' is -1, not a non-negative integer", "fix the config value"),
    ({"num_nextn_predict_layers": "1"}, "field 'num_nextn_predict_layers' is '1', not a non-negative integer", "fix the config value"),
    ({"compress_ratios": "0,0"}, "field 'compress_ratios' is not a list of integers", "fix the config value"),
    ({"compress_ratios": [0, True]}, "field 'compress_ratios' is not a list of integers", "fix the config value"),
    ({"compress_ratios": [0] * 8193}, "field 'compress_ratios' has 8,193 entries", "a model has at most 4,096 layers"),
]


@pytest.mark.parametrize(("change", "message", "fix"), V41_CHANGES, ids=lambda v: str(v)[:30])
def test_a_v41_config_that_breaks_a_rule_is_named_with_its_fix(change: dict, message: str, fix: str) -> None:
    err = refusal(parse_config, v41_flash_config() | change)
    assert says(err.message, message) and says(err.fix, fix)


def test_a_missing_field_is_named() -> None:
    config = v41_flash_config()
    del config["index_head_dim"]
    err = refusal(parse_config, config)
    assert says(err.message, "config lacks field 'index_head_dim'") and says(err.fix, "use the model's full config.json")


def test_a_huge_field_is_named_by_its_digit_count() -> None:
    err = refusal(parse_config, v41_flash_config() | {"sliding_window": 10**40})
    assert says(err.message, "field 'sliding_window' a 41-digit number is above the limit 4,294,967,296")


def test_a_long_value_is_cut_short_in_the_message() -> None:
    err = refusal(parse_config, v41_flash_config() | {"model_type": "m" * 100})
    assert says(err.message, "unknown model type '" + "m" * 56 + "...")
    assert len(err.message) < 100


def test_a_v4_config_with_ratio_one_or_two_needs_the_v41_source_lists() -> None:
    err = refusal(parse_config, v4_flash_config() | {"compress_ratios": [0, 1] * 21 + [0]})
    assert says(err.message, "config has ratio-1/2 compress_ratios but no field 'kv_source_layer_ids'")
    assert says(err.fix, "add kv_source_layer_ids and index_source_layer_ids from the DeepSeek-V4.1 config")


@pytest.mark.parametrize("ratio", [1, 2])
def test_either_low_ratio_marks_a_v41_config(ratio: int) -> None:
    err = refusal(parse_config, v4_flash_config() | {"compress_ratios": [0, ratio] + [0] * 41})
    assert says(err.message, "config has ratio-1/2 compress_ratios")


def test_a_config_with_no_layout_field_names_its_type_and_the_fix() -> None:
    err = refusal(parse_config, {"model_type": "deepseek_v4"})
    assert says(err.message, "unknown model type 'deepseek_v4': the config has neither")
    assert says(err.fix, "pass a DeepSeek-V4-Flash or DeepSeek-V4.1-Flash config.json")


@pytest.mark.parametrize("value", [[], "text", 3, None])
def test_a_config_that_is_not_an_object_is_refused(value) -> None:
    err = refusal(parse_config, value)
    assert says(err.message, "config is not a JSON object") and says(err.fix, "pass the model's config.json")


def test_the_text_config_wrapper_is_unwrapped_and_other_wrappers_are_not() -> None:
    assert parse_config({"model_type": "x", "text_config": v4_flash_config()}).family == V4
    assert parse_config(v41_flash_config() | {"text_config": "not a mapping"}).family == V41


def test_a_v4_config_keeps_no_source_lists_and_v41_keeps_both() -> None:
    v4 = parse_config(v4_flash_config() | {"kv_source_layer_ids_unused": 1})
    assert (v4.kv_source_layer_ids, v4.index_source_layer_ids) == ((), ())
    v41 = parse_config(v41_flash_config())
    assert v41.kv_source_layer_ids == (2, 8, 14, 20) and v41.index_source_layer_ids == (2, 8, 14, 20, 24, 28, 32, 36)
    assert v41.num_nextn_predict_layers == 3 and v4.num_hidden_layers == 43 and v41.max_position_embeddings == 1048576


def test_a_missing_drafter_count_is_zero() -> None:
    config = v4_flash_config()
    del config["num_nextn_predict_layers"]
    assert parse_config(config).num_nextn_predict_layers == 0


def test_a_refusal_from_a_file_names_the_file_and_keeps_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(v41_flash_config() | {"head_dim": 256}))
    err = refusal(load_config, path)
    assert says(err.message, f"config {path}: field 'head_dim' is 256") and says(err.fix, "vLLM's DeepSeek-V4 cache needs")


def test_a_folder_a_device_and_an_unreadable_file_are_refused(tmp_path: Path) -> None:
    err = refusal(read_config_json, tmp_path)
    assert says(err.message, f"config {tmp_path} is a directory") and says(err.fix, "pass the config.json file inside it")
    err = refusal(read_config_json, Path("/dev/null"))
    assert says(err.message, "config /dev/null is not a regular file") and says(err.fix, "pass the model's config.json with --config")
    inside_a_file = tmp_path / "plain" / "config.json"
    inside_a_file.parent.write_text("a file, not a folder")
    err = refusal(read_config_json, inside_a_file)
    assert says(err.message, "cannot be read: Not a directory") and says(err.fix, "check the path and permissions")


def test_a_file_of_exactly_the_limit_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    body = json.dumps({"a": 1})
    path.write_text(body + " " * ((16 << 20) - len(body)))
    assert read_config_json(path) == {"a": 1}
    path.write_text(body + " " * ((16 << 20) - len(body) + 1))
    err = refusal(read_config_json, path, "--model-config")
    assert says(err.message, "is larger than 16 MiB") and says(err.fix, "pass the model's config.json with --model-config")


def test_a_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(v4_flash_config()).encode())
    assert load_config(path).family == V4
