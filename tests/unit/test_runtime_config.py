"""Tests of the runtime configuration: exact switch set, launcher args, JSON record, headers, drift check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.errors import IntegrityError, PresetError
from kvbake.lock import read_lock
from kvbake.manifest import Manifest, load_manifest
from kvbake.serve.core.presets import choose_preset, preset_sha256
from kvbake.ship.core.release import Release
from kvbake.serve.core.runtime_config import (
    ARGS_FILE, ENV_FILE, JSON_FILE, REVIEW_REASON, Drift, Provenance, as_tree, checked_presets, compare_tree, drift_error,
    preset_names_in, render_config, render_many, settings_of_preset, settings_of_release,
)

from helpers_manifest import minimal_document, tiny_manifest

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
LOCKED = Provenance("manifest.yaml", "l" * 64)
UNLOCKED = Provenance("manifest.yaml", None)


def manifest_with(tmp_path: Path, drafter: int | None = None, **presets: dict) -> Manifest:
    document = minimal_document()
    document["presets"].update(presets)
    if drafter is not None:
        document["drafter"] = {"max_positions": drafter, "note": "remote drafter"}
    return tiny_manifest(tmp_path, document)


PACKED = {"status": "validated", "max_model_len": 2048, "switches": {"TINY_SWITCH": "3", "TINY_OTHER": "1"},
          "note": "both on", "launcher_args": ["--enable-prompt-tokens-details", "--block-size", "64"]}
HELD = {"status": "held", "max_model_len": 4096, "switches": {"TINY_SWITCH": "3"}, "note": "held for a regression"}


def test_env_holds_exactly_the_switch_set_sorted_after_the_header(tmp_path: Path) -> None:
    manifest = manifest_with(tmp_path, packed=PACKED)
    env = render_config(manifest, choose_preset(manifest, "packed"), LOCKED).files[ENV_FILE].splitlines()
    assert env[0] == f"# kvbake config packed: preset sha256 {preset_sha256(manifest, manifest.presets['packed'])}; lock sha256 {'l' * 64}; " \
                     "generated, do not edit (python build.py config --check)"
    assert env[1:] == ["TINY_OTHER=1", "TINY_SWITCH=3"]


def test_a_declared_but_unset_switch_is_absent_not_empty(tmp_path: Path) -> None:
    manifest = manifest_with(tmp_path, one={**HELD, "status": "validated"})
    files = render_config(manifest, choose_preset(manifest, "one"), LOCKED).files
    assert files[ENV_FILE].splitlines()[1:] == ["TINY_SWITCH=3"]
    control = render_config(manifest, choose_preset(manifest, "control"), LOCKED).files[ENV_FILE]
    assert "TINY" not in control and len(control.splitlines()) == 1


def test_launcher_args_are_max_model_len_then_the_presets_args(tmp_path: Path) -> None:
    manifest = manifest_with(tmp_path, packed=PACKED)
    args = render_config(manifest, choose_preset(manifest, "packed"), LOCKED).files[ARGS_FILE].splitlines()
    assert args[1:] == ["--max-model-len", "2048", "--enable-prompt-tokens-details", "--block-size", "64"]


def test_every_file_starts_with_the_same_header_naming_manifest_and_lock(tmp_path: Path) -> None:
    manifest = manifest_with(tmp_path, packed=PACKED)
    files = render_config(manifest, choose_preset(manifest, "packed"), LOCKED).files
    firsts = {name: text.splitlines()[0] for name, text in files.items()}
    assert firsts[ENV_FILE] == firsts[ARGS_FILE]
    assert "lock sha256 " + "l" * 64 in firsts[ENV_FILE]
    assert json.loads(files[JSON_FILE])["header"] == firsts[ENV_FILE][2:]
    assert firsts[JSON_FILE].startswith('{"header": "kvbake config packed')


def test_an_unlocked_manifest_says_unlocked(tmp_path: Path) -> None:
    manifest = manifest_with(tmp_path)
    header = render_config(manifest, choose_preset(manifest, "control"), UNLOCKED).files[ENV_FILE].splitlines()[0]
    assert "; lock: unlocked; generated" in header


def test_json_records_the_preset_drafter_limit_and_file_hashes(tmp_path: Path) -> None:
    manifest = manifest_with(tmp_path, drafter=4096, packed=PACKED)
    config = render_config(manifest, choose_preset(manifest, "packed"), LOCKED)
    record = json.loads(config.files[JSON_FILE])
    assert (record["preset"], record["status"], record["max_model_len"], record["prefix_block"]) == ("packed", "validated", 2048, 384)
    assert record["switches"] == {"TINY_OTHER": "1", "TINY_SWITCH": "3"} and record["override"] is None
    assert (record["drafter_max_positions"], record["drafter_limit"]) == (4096, "drafter limit: 4096 positions")
    assert set(record["sha256"]) == {ENV_FILE, ARGS_FILE}


def test_an_undeclared_drafter_limit_is_said_so(tmp_path: Path) -> None:
    manifest = manifest_with(tmp_path)
    record = json.loads(render_config(manifest, choose_preset(manifest, "control"), LOCKED).files[JSON_FILE])
    assert record["drafter_max_positions"] is None and record["drafter_limit"] == "drafter limit: not declared"


def test_a_held_preset_needs_its_flag_and_records_the_reason(tmp_path: Path) -> None:
    manifest = manifest_with(tmp_path, held=HELD)
    with pytest.raises(PresetError) as caught:
        choose_preset(manifest, "held")
    assert caught.value.exit_code == 14
    assert "preset held is held" in caught.value.message and "held for a regression" in caught.value.message
    assert "--allow-held" in caught.value.fix and "--reason TEXT" in caught.value.fix
    chosen = choose_preset(manifest, "held", allow_held=True, reason="supervised window 3")
    assert json.loads(render_config(manifest, chosen, LOCKED).files[JSON_FILE])["override"] == "--allow-held: supervised window 3"


def test_all_renders_held_presets_with_their_status_and_the_review_override(tmp_path: Path) -> None:
    manifest = manifest_with(tmp_path, held=HELD)
    records = {c.preset: json.loads(c.files[JSON_FILE]) for c in render_many(manifest, manifest.presets, LOCKED)}
    assert records["held"]["status"] == "held"
    assert records["held"]["override"] == f"--allow-held: {REVIEW_REASON}"
    assert records["control"]["override"] is None


def test_render_many_names_every_preset_that_breaks_a_rule(tmp_path: Path) -> None:
    bad = {"status": "validated", "max_model_len": 8192, "switches": {"TINY_OTHER": "1"}, "note": "alias alone"}
    manifest = manifest_with(tmp_path, drafter=4096, alias=bad, forbidden={**PACKED, "switches": {"TINY_BAD": "1"}},
                             long={**PACKED, "max_model_len": 8192})
    with pytest.raises(PresetError) as caught:
        render_many(manifest, manifest.presets, LOCKED)
    message = caught.value.one_line()
    assert "TINY_OTHER requires TINY_SWITCH" in message and "TINY_BAD is forbidden" in message
    assert "preset long: max-model-len 8192 is above the remote drafter's limit 4096" in message


def test_check_regenerates_validated_presets_and_held_ones_only_when_present_or_all(tmp_path: Path) -> None:
    manifest = manifest_with(tmp_path, held=HELD, packed=PACKED)
    assert checked_presets(manifest, [], require_all=False) == ("control", "packed")
    assert checked_presets(manifest, ["held"], require_all=False) == ("control", "held", "packed")
    assert checked_presets(manifest, [], require_all=True) == ("control", "held", "packed")


def test_compare_reports_every_drifted_missing_and_extra_file() -> None:
    expected = {"a/ranks.env": "1", "a/config.json": "2", "b/ranks.env": "3"}
    actual = {"a/ranks.env": "1", "a/config.json": "changed", "c/ranks.env": "x", "notes.txt": "y"}
    drift = compare_tree(expected, actual)
    assert drift == Drift(drifted=("a/config.json",), missing=("b/ranks.env",), extra=("c/ranks.env", "notes.txt"))
    error = drift_error(drift, "configs")
    assert isinstance(error, IntegrityError) and error.exit_code == 7
    for path in ("a/config.json", "b/ranks.env", "c/ranks.env", "notes.txt"):
        assert path in error.one_line()
    assert compare_tree(expected, dict(expected)).clean
    assert preset_names_in(actual) == ("a", "c")


def test_the_committed_standin_configs_match_the_generator() -> None:
    manifest = load_manifest(STANDIN / "manifest.yaml")
    provenance = Provenance(manifest.path.name, read_lock(manifest).core_sha256())
    folder = STANDIN / "configs"
    actual = {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}
    names = checked_presets(manifest, preset_names_in(actual), require_all=True)
    assert compare_tree(as_tree(render_many(manifest, names, provenance)), actual).clean


def test_editing_one_preset_changes_only_that_presets_files(tmp_path: Path) -> None:
    before = manifest_with(tmp_path / "a", packed=PACKED)
    after = manifest_with(tmp_path / "b", packed={**PACKED, "note": "both on, reviewed", "launcher_args": ["--block-size", "128"]})
    old = as_tree(render_many(before, before.presets, LOCKED))
    new = as_tree(render_many(after, after.presets, LOCKED))
    assert {p for p in old if old[p] != new[p]} == {"packed/ranks.env", "packed/launcher.args", "packed/config.json"}


def test_deploy_passes_byte_for_byte_what_config_writes(tmp_path: Path) -> None:
    """One source: the files a release's launcher gets equal config's files of the same preset."""
    manifest = manifest_with(tmp_path, packed=PACKED)
    chosen = choose_preset(manifest, "packed")
    files = render_config(manifest, chosen, LOCKED).files
    release = Release(image="r@sha256:" + "1" * 64, config_digest="sha256:" + "2" * 64, layers=("sha256:a",),
                      labels={"org.kvbake.lock.sha256": "l" * 64}, preset="packed", switches=dict(PACKED["switches"]),
                      max_model_len=2048, launcher_args=tuple(PACKED["launcher_args"]), deployed_by="ops", deployed_at="t",
                      reason="r", override=None, runtime_sha256=preset_sha256(manifest, chosen.preset))
    deployed = settings_of_release(release)
    assert deployed == settings_of_preset(manifest, chosen, "l" * 64)
    assert (deployed.env_text(), deployed.args_text()) == (files[ENV_FILE], files[ARGS_FILE])
    assert deployed.argv() == ["--max-model-len", "2048", "--enable-prompt-tokens-details", "--block-size", "64"]


def test_an_older_release_without_a_runtime_hash_is_marked_unrecorded(tmp_path: Path) -> None:
    manifest = manifest_with(tmp_path, packed=PACKED)
    assert settings_of_release(deployed(manifest, "packed", runtime_sha256=None)).preset_sha256 == "unrecorded"


def deployed(manifest: Manifest, name: str, **changes) -> Release:
    chosen = choose_preset(manifest, name)
    settings = settings_of_preset(manifest, chosen, "l" * 64)
    fields = dict(image="r@sha256:" + "1" * 64, config_digest="sha256:" + "2" * 64, layers=("sha256:a",), labels={}, preset=name,
                  switches=dict(settings.switches), max_model_len=settings.max_model_len, launcher_args=settings.launcher_args,
                  deployed_by="ops", deployed_at="t", reason="r", override=None, runtime_sha256=settings.preset_sha256)
    return Release(**{**fields, **changes})


def test_what_runs_matches_its_preset_or_each_difference_is_named(tmp_path: Path) -> None:
    from kvbake.serve.core.runtime_config import running_drift_error, runtime_drift

    manifest = manifest_with(tmp_path, packed=PACKED)
    release = deployed(manifest, "packed")
    assert runtime_drift(manifest, "a", release, dict(PACKED["switches"])) == []
    assert runtime_drift(manifest, "a", None, None) == ["a runs no kvbake release"]
    assert runtime_drift(manifest, "a", deployed(manifest, "packed", preset="gone"), None) == ["a runs preset gone, which the manifest no longer has"]
    assert runtime_drift(manifest, "a", deployed(manifest, "packed", launcher_args=("--old",)), None) == [
        "a runs packed with launcher_args ['--old'], the manifest now says ['--enable-prompt-tokens-details', '--block-size', '64']"]
    assert runtime_drift(manifest, "a", deployed(manifest, "packed", max_model_len=1024, switches={}), None) == [
        "a runs packed with switches {}, the manifest now says {'TINY_OTHER': '1', 'TINY_SWITCH': '3'}",
        "a runs packed with max_model_len 1024, the manifest now says 2048"]
    noted = runtime_drift(manifest, "a", deployed(manifest, "packed", runtime_sha256="0" * 64), None)
    assert len(noted) == 1 and noted[0].startswith("a runs packed as deployed (preset sha256 000000000000), the manifest's preset now hashes ")
    assert runtime_drift(manifest, "a", release, {"TINY_SWITCH": "3"}) == [
        "a's serving container sets {'TINY_SWITCH': '3'}, its release {'TINY_OTHER': '1', 'TINY_SWITCH': '3'}"]
    error = running_drift_error(noted)
    assert type(error) is IntegrityError and error.exit_code == 7
    assert error.one_line().startswith("what runs drifts from the manifest's runtime settings: a runs packed as deployed")


@pytest.mark.parametrize(("exists", "locked", "cause", "fix"), [
    (False, True, "configs does not exist", "run python build.py config --all first, review and commit it"),
    (True, True, "configs holds none of the configuration files", "run python build.py config --all first, review and commit it"),
    (False, False, "configs does not exist", "the manifest is unlocked: run python build.py lock, then python build.py config --all"),
])
def test_a_configuration_never_written_is_one_line_naming_what_to_run_first(exists: bool, locked: bool, cause: str, fix: str) -> None:
    from kvbake.serve.core.runtime_config import unwritten_error

    error = unwritten_error("configs", exists, locked)
    assert isinstance(error, IntegrityError) and error.exit_code == 7
    assert error.one_line() == f"{cause}: no configuration was written to check; fix: {fix}"


def test_check_calls_a_tree_unwritten_only_when_it_holds_none_of_the_files() -> None:
    from kvbake.serve.core.runtime_config import unwritten

    expected = {"control/ranks.env": "a", "control/launcher.args": "b"}
    assert unwritten(expected, {})
    assert unwritten(expected, {"README.md": "notes"})
    assert not unwritten(expected, {"control/ranks.env": "a"})
    assert not unwritten({}, {}), "nothing to write is nothing missing"
