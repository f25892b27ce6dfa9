"""A new release's override, preset hash, runtime config and UTC time; its JSON record; an image's runtime config."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from fake_fleet import release as fake_release
from kvbake.lock import read_lock
from kvbake.manifest import Manifest, load_manifest
from kvbake.serve.core.presets import ChosenPreset, preset_sha256
from kvbake.ship.core.push_record import pushed_image
from kvbake.ship.core.release import PushedImage, Release, make_release, release_from_json, release_to_json, runtime_config

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin" / "manifest.yaml"
PINNED = "127.0.0.1:5000/kvbake/standin-kvpack@sha256:" + "ab" * 32
UTC_STAMP = "%Y-%m-%dT%H:%M:%SZ"


@pytest.fixture()
def far_east_local_time(monkeypatch: pytest.MonkeyPatch):
    """Local time five and a half hours ahead of UTC for the test's length."""
    monkeypatch.setenv("TZ", "IST-5:30")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def released(override: str | None = "held, deployed anyway") -> tuple[Release, PushedImage, Manifest]:
    manifest = load_manifest(STANDIN)
    pushed = pushed_image(manifest, read_lock(manifest), PINNED)
    chosen = ChosenPreset(manifest.presets["control"], override)
    return make_release(pushed, chosen, manifest, "why", "op@host"), pushed, manifest


def test_the_release_keeps_the_override_the_preset_hash_and_the_image_config() -> None:
    release, pushed, manifest = released()
    assert release.override == "held, deployed anyway"
    assert release.runtime_sha256 == preset_sha256(manifest, manifest.presets["control"])
    assert release.image_config == pushed.image_config and release.image_config["Env"] is not None


def test_the_deploy_time_is_utc_to_the_second(far_east_local_time) -> None:
    before = time.strftime(UTC_STAMP, time.gmtime())
    release, _, _ = released()
    after = time.strftime(UTC_STAMP, time.gmtime())
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", release.deployed_at)
    assert before <= release.deployed_at <= after


def test_the_runtime_config_keeps_env_entrypoint_cmd_and_working_dir_only() -> None:
    config = {"Env": ("A=1",), "Entrypoint": ("/bin/sh",), "Cmd": ("-c", "serve"), "WorkingDir": "/work", "User": "serve"}
    assert runtime_config(config) == {"Env": ["A=1"], "Entrypoint": ["/bin/sh"], "Cmd": ["-c", "serve"], "WorkingDir": "/work"}


def test_an_absent_or_empty_runtime_config_is_all_empty() -> None:
    empty = {"Env": [], "Entrypoint": [], "Cmd": [], "WorkingDir": ""}
    assert runtime_config(None) == empty
    assert runtime_config({"Env": None, "Entrypoint": [], "Cmd": None, "WorkingDir": None}) == empty


def test_the_record_is_sorted_json_indented_by_one_with_the_id_and_a_final_newline() -> None:
    release = fake_release("packing", {"S": "3"}, ("--served-model-name", "m"))
    text = release_to_json(release)
    data = json.loads(text)
    assert data["id"] == release.id and list(data) == sorted(data)
    assert text.endswith("}\n") and text.splitlines()[1].startswith(' "') and not text.splitlines()[1].startswith('  ')


def test_the_record_reads_back_as_the_same_release_with_or_without_its_id() -> None:
    release = fake_release("packing", {"S": "3"}, ("--served-model-name", "m"))
    assert release_from_json(release_to_json(release)) == release
    data = json.loads(release_to_json(release))
    del data["id"]
    assert release_from_json(json.dumps(data)) == release
