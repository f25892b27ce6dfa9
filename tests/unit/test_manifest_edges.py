"""Manifest edges: standin defaults to False, every switch problem is kept, a tag field after an escaped brace is checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.errors import ManifestError
from kvbake.manifest import load_manifest
from tests.unit.helpers_manifest import minimal_document, write_manifest
from tests.unit.message_words import says


def refusal(tmp_path: Path, document: dict) -> ManifestError:
    with pytest.raises(ManifestError) as caught:
        load_manifest(write_manifest(tmp_path, document))
    assert caught.value.exit_code == 3
    return caught.value


def test_a_manifest_without_standin_is_no_standin(tmp_path: Path) -> None:
    document = minimal_document()
    del document["standin"]
    assert load_manifest(write_manifest(tmp_path, document)).standin is False


def test_a_bad_blocks_factor_is_listed_with_the_switch_problems_before_it(tmp_path: Path) -> None:
    document = minimal_document()
    document["forbidden"]["TINY_SWITCH"] = "no"
    document["switches"]["TINY_PACK"] = {"values": ["0"], "effect": "kv_blocks_factor", "requires": ["TINY_NONE"]}
    err = refusal(tmp_path, document)
    assert says(err.message, "switch TINY_SWITCH is both declared and forbidden")
    assert says(err.message, "switches.TINY_PACK.requires: 'TINY_NONE' is not a declared switch")
    assert says(err.message, "switches.TINY_PACK.values: '0' is not an integer of at least 1")


def test_a_tag_field_after_an_escaped_brace_is_still_checked(tmp_path: Path) -> None:
    document = minimal_document()
    document["output"]["tag"] = "v{{1}}-{commit}"
    assert says(refusal(tmp_path, document).message, "output.tag: unknown field {commit}")


def test_the_shipped_schemas_are_ascii_so_every_locale_reads_them_alike():
    from importlib import resources
    for name in ("manifest.schema.json", "deploy.schema.json"):
        assert resources.files("kvbake").joinpath(f"schema/{name}").read_bytes().isascii(), name
