"""A model named by a path in the container (absolute, relative or under the home folder) is no hub id: init leaves
MODEL_DIR to fill instead of handing vLLM the name to fetch."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvbake.serve.core.serve_description import Mounts
from kvbake.ship.core.init_documents import is_hub_id, model_settings
from test_init_documents import SOLO


@pytest.mark.parametrize(("model", "hub"), [
    ("deepseek-ai/DeepSeek-V4", True),
    ("/models/m", False),
    ("./models/m", False),
    ("../m", False),
    ("~/models/m", False),
    ("", False),
])
def test_only_a_name_that_is_not_a_path_is_a_hub_id(model, hub):
    assert is_hub_id(model) is hub


@pytest.mark.parametrize(("model", "settings"), [
    ("./models/m", {"MODEL_DIR": ""}),
    ("~/models/m", {"MODEL_DIR": ""}),
    ("deepseek-ai/DeepSeek-V4", {"MODEL": "deepseek-ai/DeepSeek-V4"}),
])
def test_a_model_outside_a_mount_is_fetched_by_its_hub_id_or_left_to_fill(model, settings):
    assert model_settings(replace(SOLO, mounts=Mounts(), model=model)) == settings
