"""Capacity prediction at its edges: several packing switches, a trailing option, the model's full context, the fixes."""

from __future__ import annotations

import dataclasses

import pytest
from message_words import says
from test_capacity_prediction import REALSERVE, TINY, with_args

from kvbake.errors import KvArithError
from kvbake.kvarith.dense import parse_dense_config
from kvbake.manifest import Switch, load_manifest
from kvbake.operate.core.capacity_prediction import blocks_factor, launcher_options, predict, serve_settings

REAL = load_manifest(REALSERVE)


def test_every_packing_switch_of_a_preset_multiplies_the_factor() -> None:
    extra = Switch("VLLM_X_PACK", ("3",), (), "a second packing switch", "kv_blocks_factor")
    manifest = dataclasses.replace(REAL, switches={**REAL.switches, "VLLM_X_PACK": extra})
    preset = dataclasses.replace(REAL.presets["control"], switches={"VLLM_KVBAKE_PACK_FACTOR": "2", "VLLM_X_PACK": "3"})
    assert blocks_factor(manifest, preset) == 6


def test_switches_without_the_packing_effect_leave_the_factor_alone() -> None:
    preset = dataclasses.replace(REAL.presets["control"], switches={"VLLM_KVBAKE_FAULT_REUSE": "3", "VLLM_UNDECLARED": "5"})
    assert blocks_factor(REAL, preset) == 1


def test_an_option_that_ends_the_arguments_has_an_empty_value() -> None:
    assert launcher_options(["--dtype", "float32", "--block-size"]) == {"--dtype": "float32", "--block-size": ""}


def test_a_token_without_the_double_dash_is_no_option_whatever_follows_its_first_two_characters() -> None:
    assert launcher_options(["__block_size", "128", "xxdtype=float32"]) == {}


def test_a_preset_as_long_as_the_models_context_is_predicted() -> None:
    preset = dataclasses.replace(REAL.presets["control"], max_model_len=TINY["max_position_embeddings"])
    prediction = predict(REAL, preset, parse_dense_config(TINY), "cpu")
    assert prediction.capacity.max_model_len == TINY["max_position_embeddings"]


@pytest.mark.parametrize(("args", "options"), [
    (["--block-size", "128", "--dtype", "bfloat16"], ("--kv-cache-memory-bytes", "--num-gpu-blocks-override")),
    (["--block-size", "128", "--kv-cache-memory-bytes", "64"], ("--dtype", "--kv-cache-dtype")),
], ids=["kv-size", "kv-dtype"])
def test_a_preset_that_cannot_be_predicted_names_the_options_to_give_in_its_fix(args, options) -> None:
    with pytest.raises(KvArithError) as caught:
        serve_settings(REAL, with_args(REAL.presets["control"], *args))
    assert all(says(caught.value.fix, option) for option in options)
