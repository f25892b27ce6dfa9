"""config's rendering of several presets at once: every preset that breaks a rule named, one after another, with the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.errors import PresetError
from kvbake.serve.core.runtime_config import render_many
from tests.unit.test_runtime_config import LOCKED, PACKED, manifest_with


def test_every_broken_preset_is_named_in_order_with_one_fix(tmp_path: Path) -> None:
    manifest = manifest_with(tmp_path, forbidden={**PACKED, "switches": {"TINY_BAD": "1"}}, long={**PACKED, "max_model_len": 8192},
                             drafter=4096)
    with pytest.raises(PresetError) as caught:
        render_many(manifest, manifest.presets, LOCKED)
    first, second = caught.value.message.split("; ", 1)
    assert "TINY_BAD is forbidden" in first and second.startswith("preset long: max-model-len 8192")
    assert caught.value.fix.startswith("fix those presets in the manifest, then generate again")
