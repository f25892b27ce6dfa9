"""The dense KV arithmetic: what each refusal names and tells to do, and the exact figures at the edges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.errors import KvArithError
from kvbake.kvarith.dense import (DenseModel, DenseServe, dense_capacity, dense_model_of, dtype_bytes, load_dense_config,
                                  parse_dense_config, read_model_config)
from tests.unit.message_words import says

TINY = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 8192}
MODEL = DenseModel("llama", 2, 2, 64, 8192)


def refusal(call, *args) -> KvArithError:
    with pytest.raises(KvArithError) as caught:
        call(*args)
    assert caught.value.exit_code == 17
    return caught.value


def test_a_hidden_size_that_does_not_split_over_the_heads_asks_for_head_dim() -> None:
    err = refusal(parse_dense_config, TINY | {"head_dim": None, "hidden_size": 250})
    assert says(err.message, "hidden_size 250") and says(err.fix, "give head_dim")


def test_the_derived_head_dim_is_a_whole_number() -> None:
    model = parse_dense_config(TINY | {"head_dim": None, "hidden_size": 256})
    assert model.head_dim == 64 and isinstance(model.head_dim, int)


@pytest.mark.parametrize("value", [0, -3, True, "8", 2.0, None])
def test_a_field_that_is_not_a_positive_integer_is_named_with_its_value(value) -> None:
    err = refusal(parse_dense_config, TINY | {"num_hidden_layers": value})
    assert says(err.message, "config field 'num_hidden_layers'") and says(err.message, repr(value))
    assert says(err.fix, "use the model's full config.json")


def test_one_layer_one_head_is_the_smallest_model() -> None:
    one = {"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 1,
           "max_position_embeddings": 1}
    assert parse_dense_config(one) == DenseModel("llama", 1, 1, 1, 1)


def test_too_many_layers_is_refused_naming_the_field() -> None:
    err = refusal(parse_dense_config, TINY | {"num_hidden_layers": 4097})
    assert says(err.message, "config field 'num_hidden_layers' 4,097") and says(err.message, "4,096")


def test_a_model_type_that_is_not_dense_lists_the_dense_types_in_its_fix() -> None:
    err = refusal(parse_dense_config, TINY | {"model_type": "mamba"})
    assert says(err.message, "'mamba'") and says(err.fix, "pass a llama, mistral, qwen2, qwen3 config")


def test_a_sliding_window_tells_that_only_full_attention_is_covered() -> None:
    err = refusal(parse_dense_config, TINY | {"model_type": "mistral", "sliding_window": 4096})
    assert says(err.fix, "the dense arithmetic covers full attention only")


@pytest.mark.parametrize(("use", "refused"), [(None, False), (True, True), (False, False)])
def test_llama_uses_a_window_only_when_the_config_switches_it_on(use, refused: bool) -> None:
    config = TINY | {"sliding_window": 4096} | ({} if use is None else {"use_sliding_window": use})
    if refused:
        refusal(parse_dense_config, config)
    else:
        assert parse_dense_config(config) == MODEL


def test_an_unknown_dtype_lists_the_known_ones() -> None:
    err = refusal(dtype_bytes, "int3")
    assert says(err.message, "'int3'") and says(err.fix, "use one of bfloat16, float, float16")
    assert dtype_bytes("fp8") == 1 and dtype_bytes("float32") == 4 and dtype_bytes("half") == 2


def test_kv_heads_that_do_not_split_over_the_ranks_are_refused_with_the_fix() -> None:
    model = DenseModel("llama", 2, 6, 64, 8192)
    err = refusal(dense_capacity, model, DenseServe(4096, 128, 2, kv_cache_bytes=64 << 20, tensor_parallel_size=4))
    assert says(err.message, "6 KV heads") and says(err.message, "tensor-parallel size 4")
    assert says(err.fix, "use a tensor-parallel size that divides the KV heads")


def test_more_ranks_than_kv_heads_share_one_head_each() -> None:
    # 2 KV heads over 4 ranks: each rank keeps one whole head (4 % 2 == 0, so the split is allowed)
    capacity = dense_capacity(MODEL, DenseServe(4096, 128, 2, kv_cache_bytes=64 << 20, tensor_parallel_size=4))
    assert capacity.page_bytes == 2 * 128 * 1 * 64 * 2 and isinstance(capacity.num_blocks, int)


def test_three_kv_heads_over_two_ranks_is_refused() -> None:
    model = DenseModel("llama", 2, 3, 64, 8192)
    refusal(dense_capacity, model, DenseServe(4096, 128, 2, kv_cache_bytes=64 << 20, tensor_parallel_size=2))


def test_no_kv_size_and_no_override_is_refused() -> None:
    err = refusal(dense_capacity, MODEL, DenseServe(4096, 128, 2))
    assert says(err.message, "no KV cache size given") and says(err.fix, "give the KV cache bytes")


def test_a_cache_smaller_than_one_block_names_the_block_bytes() -> None:
    per_block = 2 * 128 * 2 * 64 * 2 * 2
    err = refusal(dense_capacity, MODEL, DenseServe(4096, 128, 2, kv_cache_bytes=per_block - 1))
    assert says(err.message, f"{per_block:,} bytes") and says(err.fix, f"give at least {per_block:,} bytes")


def test_exactly_one_block_is_a_pool_of_one_block() -> None:
    per_block = 2 * 128 * 2 * 64 * 2 * 2
    capacity = dense_capacity(MODEL, DenseServe(4096, 128, 2, kv_cache_bytes=per_block))
    assert capacity.num_blocks == 1 and not capacity.fits


def test_an_override_of_one_block_is_taken_and_zero_is_refused() -> None:
    assert dense_capacity(MODEL, DenseServe(4096, 128, 2, num_blocks_override=1)).num_blocks == 1
    err = refusal(dense_capacity, MODEL, DenseServe(4096, 128, 2, num_blocks_override=0))
    assert says(err.fix, "give at least")


def test_too_many_blocks_names_the_kv_cache_blocks() -> None:
    err = refusal(dense_capacity, MODEL, DenseServe(4096, 128, 2, num_blocks_override=10**9 + 1))
    assert says(err.message, "KV cache blocks 1,000,000,001")


def test_the_log_line_names_the_device_pool() -> None:
    capacity = dense_capacity(MODEL, DenseServe(4096, 128, 2, kv_cache_bytes=64 << 20))
    assert capacity.log_line().startswith("GPU KV cache size: ")
    assert capacity.log_line("cpu").startswith("CPU KV cache size: ")
    assert capacity.log_line("xpu").startswith("XPU KV cache size: ")


def test_a_config_of_another_type_names_the_file_the_dense_types_and_the_fix(tmp_path: Path) -> None:
    err = refusal(dense_model_of, tmp_path / "config.json", {"model_type": "mamba"})
    assert says(err.message, f"config {tmp_path / 'config.json'}") and says(err.message, "'mamba'")
    assert says(err.message, "llama, mistral, qwen2, qwen3") and says(err.fix, "pass the config.json of a dense")
    assert says(refusal(dense_model_of, tmp_path / "c.json", ["llama"]).message, "model type None")


def test_a_dense_config_refused_inside_names_the_file_and_keeps_the_fix(tmp_path: Path) -> None:
    err = refusal(dense_model_of, tmp_path / "config.json", TINY | {"num_hidden_layers": 0})
    assert says(err.message, f"config {tmp_path / 'config.json'}") and says(err.message, "config field 'num_hidden_layers'")
    assert says(err.fix, "use the model's full config.json")


def test_a_multimodal_config_is_read_through_its_text_config(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llava", "text_config": TINY}))
    assert load_dense_config(path) == MODEL
    assert load_dense_config(tmp_path) == MODEL


def test_a_missing_config_names_the_option_that_gave_it(tmp_path: Path) -> None:
    assert says(refusal(load_dense_config, tmp_path / "absent.json").fix, "--config")
    assert says(refusal(load_dense_config, tmp_path / "absent.json", "--model-config").fix, "--model-config")
    assert says(refusal(read_model_config, tmp_path / "absent.json").fix, "pass the model's config.json with --config")


def test_without_a_kv_head_count_every_attention_head_is_a_kv_head() -> None:
    config = {key: value for key, value in TINY.items() if key != "num_key_value_heads"}
    assert parse_dense_config(config).num_key_value_heads == 4
