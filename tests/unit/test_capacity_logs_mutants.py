"""predict_preset's refusals name what the operator gave: the presets to choose from, the option and the config file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.errors import KvArithError, PresetError
from kvbake.manifest import Manifest
from kvbake.operate.adapters.capacity_logs import predict_preset
from message_words import says
from test_capacity_prediction import TINY, realserve  # noqa: F401 (realserve is a fixture)


def test_an_unknown_preset_lists_every_preset_to_choose_from(realserve: Manifest) -> None:
    with pytest.raises(PresetError) as caught:
        predict_preset(realserve, "nope", Path("/nonexistent"), "cpu")
    assert len(realserve.presets) > 1
    assert says(caught.value.fix, ", ".join(realserve.presets))


def test_a_missing_model_config_is_told_to_pass_model_config(realserve: Manifest, tmp_path: Path) -> None:
    with pytest.raises(KvArithError) as caught:
        predict_preset(realserve, next(iter(realserve.presets)), tmp_path / "absent.json", "cpu")
    assert says(caught.value.fix, "--model-config")


def test_a_config_of_another_model_type_names_the_file(realserve: Manifest, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY | {"model_type": "mamba"}))
    with pytest.raises(KvArithError) as caught:
        predict_preset(realserve, next(iter(realserve.presets)), path, "cpu")
    assert says(caught.value.message, str(path))
