"""`lock --migrate`: a format-1 lock (it pinned the whole manifest file) or a format-2 lock (it pinned the base's layer
sizes) becomes the format-3 lock that `lock` writes, without an engine; a second run has nothing to migrate and leaves
the file alone; the migrated lock plans its image."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from kvbake import cli
from kvbake.engines.adapters import client as engine_module
from kvbake.errors import IntegrityError
from kvbake.lock import Lock, read_lock, write_lock
from kvbake.bake.adapters.pinning import PENDING, migrate_lock
from kvbake.manifest import Manifest, load_manifest
from kvbake.bake.core.plan import make_plan, read_overlay

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"


class NoEngine:
    """Any engine call fails the test: migrating needs no engine."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name: str):
        raise AssertionError(f"lock --migrate contacted an engine (client.{name})")


SAVED_SIZES = (152309760, 123344384)  # what a `docker save` of the stand-in base gave formats 1 and 2


@pytest.fixture(params=[1, 2])
def older_lock(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Manifest, bytes, Lock]:
    """A copy of the stand-in whose lock is the format-1 (or format-2) lock of the same pins; returns the committed
    format-3 bytes."""
    monkeypatch.setattr(engine_module, "DockerClient", NoEngine)
    root = tmp_path / "standin"
    shutil.copytree(STANDIN, root, ignore=shutil.ignore_patterns(".kvbake"))
    manifest = load_manifest(root / "manifest.yaml")
    committed = manifest.lock_path.read_bytes()
    lock = read_lock(manifest)
    pinned = manifest.sha256 if request.param == 1 else manifest.image_sha256
    old = replace(lock, format=request.param, manifest_sha256=pinned, base=replace(lock.base, layer_sizes=SAVED_SIZES), derived=PENDING)
    old = old.with_derived(make_plan(manifest, old, read_overlay(manifest, lock)).derived())
    write_lock(manifest.lock_path, old)
    assert read_lock(manifest) == old
    return manifest, committed, old


def planned_image(manifest: Manifest) -> str:
    lock = read_lock(manifest)
    return make_plan(manifest, lock, read_overlay(manifest, lock)).image_id


def test_an_older_lock_migrates_to_the_format_3_lock_and_a_second_run_changes_nothing(older_lock):
    manifest, committed, old = older_lock
    assert planned_image(manifest) == old.derived.image_id, "a format-1 lock still plans the image it always did"
    lock, changed = migrate_lock(manifest)
    assert changed is True and lock.format == 3
    assert manifest.lock_path.read_bytes() == committed, "the same pins, written as `lock` writes a format-3 lock"
    assert (lock.files, lock.patches, lock.source_date_epoch) == (old.files, old.patches, old.source_date_epoch)
    assert lock.base == replace(old.base, layer_sizes=None) and "layer_sizes" not in json.loads(committed)["base"]
    assert lock.manifest_sha256 == manifest.image_sha256
    assert planned_image(manifest) == lock.derived.image_id == json.loads(committed)["derived"]["image_id"]
    assert lock.derived.image_id != old.derived.image_id, "the labels name the new hash: a new config digest"
    written = manifest.lock_path.stat()
    again, changed = migrate_lock(manifest)
    assert changed is False and again == lock
    assert manifest.lock_path.read_bytes() == committed and manifest.lock_path.stat().st_mtime_ns == written.st_mtime_ns


def test_lock_migrate_on_the_command_line_says_what_it_did_then_that_there_is_nothing_to_migrate(older_lock, capsys):
    manifest, committed, _ = older_lock
    new_id = json.loads(committed)["derived"]["image_id"]
    argv = ["lock", "--migrate", "--manifest", str(manifest.path)]
    assert cli.main(argv) == 0
    said = capsys.readouterr().out
    assert said.startswith("migrated manifest.lock.json to format 3: ") and new_id[:19] in said
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == "manifest.lock.json is already format 3; nothing to migrate\n"
    assert cli.main(["plan", "--json", "--manifest", str(manifest.path)]) == 0
    assert json.loads(capsys.readouterr().out)["image_id"] == new_id


def test_an_older_lock_whose_overlay_drifted_is_not_migrated(older_lock):
    manifest, _, old = older_lock
    drifted = manifest.root / "overlay" / old.files[0].path
    drifted.write_bytes(drifted.read_bytes() + b"# edited by hand\n")
    before = manifest.lock_path.read_bytes()
    with pytest.raises(IntegrityError) as refused:
        migrate_lock(manifest)
    assert refused.value.one_line() == (f"overlay/ drifts from manifest.lock.json ({old.files[0].path}), so the lock cannot be migrated; "
                                        "fix: restore overlay/ from version control, or run python build.py lock")
    assert manifest.lock_path.read_bytes() == before
