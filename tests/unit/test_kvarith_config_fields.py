"""config.json fields at their edges: the accepted bounds, what a refusal names, and ratios of drafter layers."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.errors import KvArithError
from kvbake.kvarith.config import (
    MAX_CONFIG_INT, MAX_CONFIG_LAYERS, V4, V41, ModelConfig, detect_family, parse_config, read_config_json,
)
from kvbake.kvarith.examples import v4_flash_config, v41_flash_config
from kvbake.kvarith.limits import shown
from tests.unit.message_words import says


def _refusal(data: dict) -> KvArithError:
    with pytest.raises(KvArithError) as caught:
        parse_config(data)
    return caught.value


def test_a_ratio_one_layer_below_the_first_kv_source_is_refused_and_named() -> None:
    data = v41_flash_config()
    data["compress_ratios"][1] = 1  # layer 1 compressed, the first kv source is layer 2
    err = _refusal(data)
    assert says(err.message, "layer 1")
    assert says(err.message, "2")


@pytest.mark.parametrize("field", ["num_hidden_layers", "sliding_window", "index_head_dim",
                                   "max_position_embeddings"])
def test_a_positive_field_of_one_is_accepted(field: str) -> None:
    data = v4_flash_config()
    data[field] = 1
    data["compress_ratios"] = [0] * max(1, len(data["compress_ratios"]))
    assert getattr(parse_config(data), field) == 1


def test_a_layer_list_of_twice_the_layer_limit_is_accepted_and_one_more_is_refused() -> None:
    data = v4_flash_config()
    data["compress_ratios"] = [0] * (2 * MAX_CONFIG_LAYERS)
    assert len(parse_config(data).compress_ratios) == 2 * MAX_CONFIG_LAYERS
    data["compress_ratios"].append(0)
    err = _refusal(data)
    assert says(err.message, "compress_ratios")


def test_a_drafter_count_above_the_limit_names_its_field() -> None:
    data = v4_flash_config()
    data["num_nextn_predict_layers"] = MAX_CONFIG_INT + 1
    err = _refusal(data)
    assert says(err.message, "num_nextn_predict_layers")
    assert says(err.message, shown(MAX_CONFIG_INT + 1))


def test_a_negative_integer_field_is_shown_with_thousands_separators() -> None:
    data = v4_flash_config()
    data["head_dim"] = -5000
    assert says(_refusal(data).message, "-5,000")


def test_an_unknown_model_type_of_sixty_characters_is_shown_whole() -> None:
    data = v4_flash_config()
    data["model_type"] = "m" * 58  # its repr is 60 characters long
    assert says(_refusal(data).message, repr("m" * 58))


def test_an_unknown_model_type_of_sixty_one_characters_is_cut_to_fifty_seven_and_dots() -> None:
    data = v4_flash_config()
    data["model_type"] = "m" * 59  # its repr is 61 characters long
    message = _refusal(data).message
    assert repr("m" * 59)[:57] + "..." in message
    assert repr("m" * 59) not in message


def test_an_index_source_list_alone_marks_a_config_as_v41() -> None:
    data = v4_flash_config()
    data["index_source_layer_ids"] = [2]
    assert detect_family(data) == V41
    assert detect_family(v4_flash_config()) == V4


def test_the_ratio_of_a_layer_past_the_list_is_zero() -> None:
    config = ModelConfig(V4, 2, 512, 64, 128, (4, 128), 128, 1024)
    assert [config.ratio(layer) for layer in range(4)] == [4, 128, 0, 0]


def test_undecodable_bytes_and_unusable_json_keep_the_fix_that_names_the_option(tmp_path: Path) -> None:
    for name, raw in (("latin.json", b'{"a": "\xff"}'), ("deep.json", b"[" * 100_000 + b"]" * 100_000)):
        file = tmp_path / name
        file.write_bytes(raw)
        with pytest.raises(KvArithError) as caught:
            read_config_json(file, "--base-config")
        assert says(caught.value.fix, "--base-config")


def test_a_huge_config_file_is_refused_after_reading_only_past_the_limit(tmp_path: Path) -> None:
    file = tmp_path / "huge.json"
    with file.open("wb") as handle:
        handle.truncate(1 << 40)  # a sparse terabyte: reading it whole would not fit in memory
    with pytest.raises(KvArithError) as caught:
        read_config_json(file)
    assert says(caught.value.message, "16 MiB")
