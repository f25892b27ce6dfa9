"""Tests of manifest loading: the valid and invalid example folders, frozen values and defaults."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from kvbake.errors import ManifestError
from kvbake.manifest import Switch, load_manifest, manifest_schema
from tests.unit.helpers_manifest import MINIMAL, minimal_document, referenced_files, tiny_manifest, write_manifest, write_patch_files

DATA = Path(__file__).resolve().parent.parent / "data" / "manifests"
VALID = sorted((DATA / "valid").glob("*.yaml"))
INVALID = sorted((DATA / "invalid").glob("*.yaml"))
DIRECTIVE = re.compile(r"^# (expect|symlink): (.*)$")


def directives(text: str) -> dict[str, list[str]]:
    """The `# expect:` and `# symlink:` comment lines at the top of a data file."""
    found: dict[str, list[str]] = {"expect": [], "symlink": []}
    for line in text.splitlines():
        match = DIRECTIVE.match(line)
        if not match:
            break
        found[match.group(1)].append(match.group(2))
    return found


def stage(source: Path, tmp_path: Path) -> Path:
    """Copy a data manifest into its own folder, create its symlinks and (empty) patch files."""
    folder = tmp_path / "project"
    folder.mkdir()
    (tmp_path / "outside").mkdir()
    text = source.read_text(encoding="utf-8")
    for spec in directives(text)["symlink"]:
        link, target = (part.strip() for part in spec.split("->"))
        (folder / link).symlink_to(target, target_is_directory=True)
    target = folder / "manifest.yaml"
    shutil.copyfile(source, target)
    write_patch_files(folder, referenced_files(text))
    return target


def test_the_data_folders_are_not_empty() -> None:
    assert len(VALID) >= 3
    assert len(INVALID) >= 18


@pytest.mark.parametrize("source", VALID, ids=lambda p: p.stem)
def test_every_valid_manifest_loads(source: Path, tmp_path: Path) -> None:
    path = stage(source, tmp_path)
    manifest = load_manifest(path)
    assert manifest.path == path.absolute()
    assert [p.file for p in manifest.chain] == referenced_files(source.read_text(encoding="utf-8"))
    for patch in manifest.chain:
        assert patch.path == (path.parent / patch.file).resolve()
        assert patch.path.is_file()


@pytest.mark.parametrize("source", INVALID, ids=lambda p: p.stem)
def test_every_invalid_manifest_is_refused_with_its_expected_message(source: Path, tmp_path: Path) -> None:
    expected = directives(source.read_text(encoding="utf-8"))["expect"]
    assert expected, f"{source.name} must start with a '# expect: ...' line"
    with pytest.raises(ManifestError) as caught:
        load_manifest(stage(source, tmp_path))
    err = caught.value
    assert err.exit_code == 3
    text = err.one_line()
    assert "\n" not in text
    for fragment in expected:
        assert fragment in text
    assert err.fix


def test_several_errors_are_reported_at_once_in_path_order(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        load_manifest(stage(DATA / "invalid" / "several-errors.yaml", tmp_path))
    text = caught.value.one_line()
    problems = text.split(": ", 2)[2].split("; fix:")[0].split("; ")
    assert [p.split(":")[0] for p in problems] == ["base.platform", "donor.revision", "presets.control.max_model_len", "presets.control.status"]


def test_minimal_manifest_freezes_with_defaults(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    assert manifest.name == "tiny"
    assert manifest.standin is True
    assert manifest.licenses == "Apache-2.0"
    assert manifest.description == ""
    assert manifest.drafter_max_positions is None
    assert manifest.base.tag == "1"
    assert manifest.lock_path.name == "manifest.lock.json"
    assert manifest.root == tmp_path
    assert list(manifest.switches) == ["TINY_OTHER", "TINY_SWITCH"]
    assert manifest.switches["TINY_OTHER"].requires == ("TINY_SWITCH",)
    assert manifest.presets["control"].prefix_block == 384
    assert manifest.presets["control"].launcher_args == ()
    assert manifest.patch("0001").role == "feature"
    assert manifest.patch("0001").needed_by == ()


def test_full_manifest_keeps_every_optional_field(tmp_path: Path) -> None:
    manifest = load_manifest(stage(DATA / "valid" / "full.yaml", tmp_path))
    assert manifest.licenses == "MIT"
    assert manifest.standin is False
    assert manifest.drafter_max_positions == 4096
    assert manifest.base.tag == "v5.1"
    assert manifest.patch("0059").needed_by == ("0060", "0076")
    assert manifest.patch("0051").summary == "page packing"
    assert manifest.switches["FULL_KV_PAIR"] == Switch("FULL_KV_PAIR", ("3",), (), "pack three pages", None)
    assert manifest.switches["FULL_ALIAS"] == Switch("FULL_ALIAS", ("1",), ("FULL_TRANSIENT",), "", None)
    assert manifest.presets["packing-327680"].prefix_block == 512
    assert manifest.presets["packing-327680"].launcher_args == ("--enforce-eager",)
    assert dict(manifest.presets["alias"].switches) == {"FULL_ALIAS": "1", "FULL_TRANSIENT": "1"}
    assert list(manifest.forbidden) == ["FULL_KV_DISPLAY", "FULL_NVFP4_KV"]


def test_manifest_sha256_is_of_the_raw_bytes(tmp_path: Path) -> None:
    import hashlib

    first = tiny_manifest(tmp_path / "a")
    second = tiny_manifest(tmp_path / "b", MINIMAL + "# a trailing comment\n")
    assert first.sha256 == hashlib.sha256(MINIMAL.encode()).hexdigest()
    assert second.sha256 != first.sha256


def test_a_patch_path_inside_a_symlinked_folder_that_stays_inside_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "0001-tiny.patch").write_bytes(b"")
    (tmp_path / "patches").symlink_to("real", target_is_directory=True)
    manifest = load_manifest(write_manifest(tmp_path))
    assert manifest.patch("0001").path == tmp_path.resolve() / "real" / "0001-tiny.patch"


def test_a_missing_manifest_is_a_manifest_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="manifest absent.yaml not found") as caught:
        load_manifest(tmp_path / "absent.yaml")
    assert caught.value.exit_code == 3
    assert "--manifest" in caught.value.one_line()


def test_a_patch_escaping_through_a_symlinked_file_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "patches").mkdir(parents=True)
    (tmp_path / "elsewhere.patch").write_bytes(b"")
    (project / "patches" / "0001-tiny.patch").symlink_to(tmp_path / "elsewhere.patch")
    with pytest.raises(ManifestError) as caught:
        load_manifest(write_manifest(project))
    assert caught.value.exit_code == 3
    assert all(field in caught.value.message for field in ("manifest.yaml", "chain 0001", "'patches/0001-tiny.patch'", "symlink"))
    assert "symlink" in caught.value.fix


def test_every_tag_field_the_loader_accepts_can_be_formatted(tmp_path: Path) -> None:
    document = minimal_document()
    document["output"]["tag"] = "{name}-{base_tag}-{short_id}"
    manifest = tiny_manifest(tmp_path, document)
    assert manifest.output.tag.format(name="n", base_tag="b", short_id="s") == "n-b-s"


@pytest.mark.parametrize("tag,problem", [
    ("{base_tag", "expected '}' before end of string"),
    ("v}-{short_id}", "Single '}' encountered in format string"),
], ids=["{base_tag", "v}-{short_id}"])
def test_an_unbalanced_brace_in_the_tag_template_is_a_manifest_error(tag: str, problem: str, tmp_path: Path) -> None:
    document = minimal_document()
    document["output"]["tag"] = tag
    with pytest.raises(ManifestError) as caught:
        tiny_manifest(tmp_path, document)
    assert caught.value.exit_code == 3
    assert all(field in caught.value.message for field in ("manifest.yaml", "output.tag", problem, repr(tag)))


def test_the_schema_is_package_data_and_requires_every_top_level_section() -> None:
    schema = manifest_schema()
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"format", "name", "base", "donor", "chain", "switches", "forbidden", "presets", "output"}


@pytest.mark.parametrize("tag,field", [
    ("{base_tag!r}-{short_id}", "{base_tag}"),
    ("{base_tag}-{short_id:>20}", "{short_id}"),
], ids=["{base_tag!r}-{short_id}", "{base_tag}-{short_id:>20}"])
def test_a_tag_template_with_a_conversion_or_format_spec_is_refused(tag: str, field: str, tmp_path: Path) -> None:
    document = minimal_document()
    document["output"]["tag"] = tag
    with pytest.raises(ManifestError) as caught:
        tiny_manifest(tmp_path, document)
    assert caught.value.exit_code == 3
    assert all(part in caught.value.message for part in ("manifest.yaml", "output.tag", field, "conversion or format spec"))


def test_a_multiline_description_is_kept(tmp_path: Path) -> None:
    manifest = load_manifest(stage(DATA / "valid" / "multiline-description.yaml", tmp_path))
    assert manifest.description == "First line.\nSecond line,\tafter a tab.\n"


def _set(document: dict, field: str, value: object) -> None:
    *parents, last = field.split(".")
    node = document
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[int(last) if last.isdigit() else last] = value


@pytest.mark.parametrize("field,value,shown", [
    ("switches.TINY_SWITCH.values.0", "3\n", "switches.TINY_SWITCH.values[0] contains control character U+000A"),
    ("presets.control.note", "all\roff", "presets.control.note contains control character U+000D"),
    ("presets.control.launcher_args", ["--x", "--y\x7f"], "presets.control.launcher_args[1] contains control character U+007F"),
    ("presets.control.switches", {"TINY_SWITCH": "3\t"}, "presets.control.switches.TINY_SWITCH contains control character U+0009"),
    ("output.tag", "{base_tag}\x1b", "output.tag contains control character U+001B"),
    ("licenses", "MIT\x00", "licenses contains control character U+0000"),
    ("forbidden.TINY_BAD", "why\nnot", "forbidden.TINY_BAD contains control character U+000A"),
    ("chain.0.file", "patches/0001-tiny.patch\x00", "chain[0].file contains control character U+0000"),
    ("chain.0.summary", "one\ntwo", "chain[0].summary contains control character U+000A"),
    ("description", "bell\x07", "description contains control character U+0007"),
])
def test_a_control_character_in_a_written_string_is_refused_by_field(field: str, value: object, shown: str, tmp_path: Path) -> None:
    document = minimal_document()
    _set(document, field, value)
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "manifest.yaml")
    assert caught.value.exit_code == 3
    assert f"manifest.yaml: {shown}" in caught.value.one_line()
    assert "remove control characters" in caught.value.one_line()


@pytest.mark.parametrize("url", [
    "https://builder:s3cret-value@example.invalid/tiny.git",
    "https://ghp_0123456789abcdefghijABCDEFGHIJ012345@example.invalid/tiny.git",
    "https://builder@example.invalid/tiny.git",
    "https://:only-a-password@example.invalid/tiny.git",
])
def test_userinfo_in_the_donor_url_is_refused_without_echoing_it(url: str, tmp_path: Path) -> None:
    document = minimal_document()
    document["donor"]["url"] = url
    with pytest.raises(ManifestError) as caught:
        tiny_manifest(tmp_path, document)
    text = caught.value.one_line()
    assert caught.value.exit_code == 3
    assert "manifest.yaml: donor.url holds URL userinfo (user:token@)" in text
    assert "credential helper" in text
    assert url.split("//")[1].split("@")[0] not in text


def test_a_url_with_userinfo_in_any_string_is_refused(tmp_path: Path) -> None:
    document = minimal_document()
    document["chain"][0]["summary"] = "from http://ci:abc123@mirror.invalid/x.git"
    with pytest.raises(ManifestError, match=r"chain\[0\]\.summary holds URL userinfo") as caught:
        tiny_manifest(tmp_path, document)
    assert "abc123" not in caught.value.one_line()


def test_a_patch_path_error_names_the_manifest_file(tmp_path: Path) -> None:
    document = minimal_document()
    document["chain"][0]["file"] = "/etc/passwd"
    with pytest.raises(ManifestError) as caught:
        tiny_manifest(tmp_path, document)
    assert caught.value.exit_code == 3
    assert caught.value.message.startswith("manifest.yaml") and "chain 0001" in caught.value.message
    assert "'/etc/passwd'" in caught.value.message and "absolute" in caught.value.message


def test_a_nesting_deeper_than_the_limit_is_refused(tmp_path: Path) -> None:
    text = MINIMAL + "extra: " + "[" * 40 + "]" * 40 + "\n"
    with pytest.raises(ManifestError, match="is nested more than 32 levels deep"):
        tiny_manifest(tmp_path, text)


def test_a_nesting_too_deep_for_the_yaml_reader_is_refused(tmp_path: Path) -> None:
    text = MINIMAL + "extra: " + "[" * 1500 + "]" * 1500 + "\n"
    with pytest.raises(ManifestError, match="manifest.yaml: YAML nested too deeply to read"):
        tiny_manifest(tmp_path, text)


@pytest.mark.parametrize("key,shown", [
    ("TINY\x1bX", "a key of presets.control.switches contains control character U+001B"),
    ("password=hunter2", "a key of presets.control.switches holds a password or token query pair"),
])
def test_a_bad_mapping_key_is_named_by_its_parent_and_never_echoed(key: str, shown: str, tmp_path: Path) -> None:
    document = minimal_document()
    document["presets"]["control"]["switches"] = {key: "3"}
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "manifest.yaml")
    assert caught.value.exit_code == 3
    assert f"manifest.yaml: {shown}" in caught.value.one_line()
    assert key not in caught.value.one_line()


DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("image", "name", "tag", "digest", "node_name"), [
    ("ghcr.io/henryous/deepseek-v41-1017-dgx-spark:v5", "ghcr.io/henryous/deepseek-v41-1017-dgx-spark", "v5", None,
     "ghcr.io/henryous/deepseek-v41-1017-dgx-spark:v5"),
    (f"ghcr.io/henryous/deepseek-v41-1017-dgx-spark:v5@{DIGEST}", "ghcr.io/henryous/deepseek-v41-1017-dgx-spark", "v5", DIGEST,
     "ghcr.io/henryous/deepseek-v41-1017-dgx-spark:v5"),
    (f"127.0.0.1:5000/team/base@{DIGEST}", "127.0.0.1:5000/team/base", "sha256-" + "ab" * 6, DIGEST,
     "127.0.0.1:5000/team/base:sha256-" + "ab" * 6),
    ("127.0.0.1:5000/team/base:1", "127.0.0.1:5000/team/base", "1", None, "127.0.0.1:5000/team/base:1"),
])
def test_a_base_may_be_pinned_by_digest(tmp_path: Path, image: str, name: str, tag: str, digest: str | None, node_name: str) -> None:
    document = minimal_document()
    document["base"]["image"] = image
    base = tiny_manifest(tmp_path, document).base
    assert (base.name, base.tag, base.digest, base.node_name) == (name, tag, digest, node_name)


@pytest.mark.parametrize("image", ["base@sha256:abc", "base", f"base:1@{DIGEST}x", "base@md5:" + "a" * 32])
def test_a_malformed_base_reference_is_refused(tmp_path: Path, image: str) -> None:
    document = minimal_document()
    document["base"]["image"] = image
    with pytest.raises(ManifestError, match=r"base\.image: .* does not match"):
        tiny_manifest(tmp_path, document)
