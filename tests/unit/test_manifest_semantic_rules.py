"""The manifest's semantic rules and file reading: each problem names the entry, every problem is listed, and the fixes."""

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


def with_chain(*entries: dict) -> dict:
    document = minimal_document()
    document["chain"] = list(entries)
    return document


def patch(patch_id: str, **fields) -> dict:
    return {"id": patch_id, "file": f"patches/{patch_id}.patch", "role": "feature"} | fields


def test_a_user_missing_from_the_chain_and_one_before_its_dependency_are_told_apart(tmp_path: Path) -> None:
    err = refusal(tmp_path, with_chain(patch("0002"), patch("0001", role="dependency", needed_by=["0002", "0009"])))
    assert says(err.message, "chain[1] (0001): needed_by '0002' does not come after it")
    assert says(err.message, "chain[1] (0001): needed_by '0009' is not in the chain")
    assert says(err.fix, "correct the manifest entries named above")


def test_a_dependency_must_name_its_users_and_ids_are_unique(tmp_path: Path) -> None:
    err = refusal(tmp_path, with_chain(patch("0001", role="dependency"), patch("0003"), patch("0003")))
    assert says(err.message, "chain[0] (0001): a dependency patch must name what needs it in needed_by")
    assert says(err.message, "chain: duplicate patch id '0003'")


def test_a_dependency_with_a_later_user_is_accepted(tmp_path: Path) -> None:
    manifest = load_manifest(write_manifest(tmp_path, with_chain(patch("0001", role="dependency", needed_by=["0002"]), patch("0002"))))
    assert manifest.patch("0001").needed_by == ("0002",) and manifest.patch("0002").role == "feature"


def test_switch_requirements_are_checked_with_a_suggestion(tmp_path: Path) -> None:
    document = minimal_document()
    document["switches"]["TINY_OTHER"]["requires"] = ["TINY_SWITCHH"]
    document["switches"]["TINY_SELF"] = {"values": ["1"], "requires": ["TINY_SELF"]}
    err = refusal(tmp_path, document)
    assert says(err.message, "switches.TINY_OTHER.requires: 'TINY_SWITCHH' is not a declared switch (did you mean 'TINY_SWITCH'?)")
    assert says(err.message, "switches.TINY_SELF.requires: a switch cannot require itself")


def test_a_switch_both_declared_and_forbidden_is_refused(tmp_path: Path) -> None:
    document = minimal_document()
    document["forbidden"]["TINY_SWITCH"] = "no"
    assert says(refusal(tmp_path, document).message, "switch TINY_SWITCH is both declared and forbidden")


@pytest.mark.parametrize(("value", "accepted"), [("1", True), ("999999", True), ("0", False), ("1000000", False), ("01", False),
                                                 ("x2", False)])
def test_a_blocks_factor_is_a_whole_number_from_1_to_999999(tmp_path: Path, value: str, accepted: bool) -> None:
    document = minimal_document()
    document["switches"]["TINY_PACK"] = {"values": [value], "effect": "kv_blocks_factor"}
    if accepted:
        assert load_manifest(write_manifest(tmp_path, document)).switches["TINY_PACK"].effect == "kv_blocks_factor"
    else:
        err = refusal(tmp_path, document)
        assert says(err.message, f"switches.TINY_PACK.values: {value!r} is not an integer of at least 1")


def test_an_unknown_tag_field_lists_the_known_ones_in_braces(tmp_path: Path) -> None:
    document = minimal_document()
    document["output"]["tag"] = "{base_tag}-{commit}"
    err = refusal(tmp_path, document)
    assert says(err.message, "output.tag: unknown field {commit}; use {base_tag}, {short_id}, {name}")


def test_a_tag_template_that_does_not_parse_is_named(tmp_path: Path) -> None:
    document = minimal_document()
    document["output"]["tag"] = "{base_tag"
    assert says(refusal(tmp_path, document).message, "output.tag: expected '}' before end of string in '{base_tag'")


def test_every_schema_problem_is_counted_and_the_fix_names_the_schema(tmp_path: Path) -> None:
    document = minimal_document()
    document["name"] = 3
    document["extra"] = 1
    err = refusal(tmp_path, document)
    assert says(err.message, "manifest.yaml: 2 schema problem(s)")
    assert says(err.fix, "edit the manifest to match the schema in kvbake/schema/manifest.schema.json")


def test_a_missing_or_unreadable_manifest_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "absent.yaml")
    assert says(caught.value.message, "manifest absent.yaml not found") and says(caught.value.fix, "pass --manifest PATH")
    (tmp_path / "folder.yaml").mkdir()
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "folder.yaml")
    assert says(caught.value.message, "manifest folder.yaml unreadable: Is a directory")
    assert says(caught.value.fix, "check the file's permissions")


def test_a_patch_file_outside_the_folder_is_named_with_the_manifest(tmp_path: Path) -> None:
    err = refusal(tmp_path, with_chain(patch("0001", file="/etc/passwd")))
    assert says(err.message, "manifest.yaml: chain 0001 file '/etc/passwd' is absolute")
    assert says(err.fix, "give a path relative to the manifest's folder")


def test_the_manifest_finds_its_patches_and_its_lock_beside_it(tmp_path: Path) -> None:
    manifest = load_manifest(write_manifest(tmp_path, minimal_document()))
    assert manifest.patch("0001").path == (tmp_path / "patches" / "0001-tiny.patch").resolve()
    assert manifest.chain[0].summary == "" and manifest.switches["TINY_SWITCH"].summary == ""
    assert manifest.switches["TINY_OTHER"].requires == ("TINY_SWITCH",) and manifest.switches["TINY_SWITCH"].effect is None
    assert list(manifest.switches) == ["TINY_OTHER", "TINY_SWITCH"] and manifest.description == ""
