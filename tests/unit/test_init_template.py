"""The manifest template `init` starts from is the project's production manifest, byte for byte."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_packaged_template_is_the_production_manifest():
    packaged = resources.files("kvbake").joinpath("data/production.manifest.yaml").read_bytes()
    assert packaged == (REPO / "manifest.yaml").read_bytes(), "copy manifest.yaml to kvbake/data/production.manifest.yaml"
