"""check_base: the moved-tag refusal names the tag and its new config, a differing base lists each difference and the fix, and the containerd store reads the base's own manifest."""

from __future__ import annotations

import json
import types

import pytest

from kvbake.bake.adapters.builder import check_base
from kvbake.bake.adapters.pinning import create_lock
from kvbake.engines.adapters.client import Engine
from kvbake.engines.core.containerd import StoreManifest
from kvbake.engines.core.detection import EngineProfile
from kvbake.errors import BaseImageError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from tests.unit.bake_project import BASE_IMAGE, MODULE, base_entries, engine_with_base, project
from tests.unit.message_words import says

ELSEWHERE = "kvbake-test/elsewhere:1"


@pytest.fixture()
def manifest(tmp_path, monkeypatch):
    """The tiny project, locked against the fake engine's base."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    manifest = project(tmp_path)
    create_lock(engine_with_base(), manifest)
    return manifest


def refusal(engine, manifest, lock) -> BaseImageError:
    with pytest.raises(BaseImageError) as caught:
        check_base(engine, manifest, lock)
    return caught.value


def test_a_moved_tag_names_the_tag_and_the_config_it_names_now(manifest):
    moved = engine_with_base(base_entries(MODULE + "# moved\n"))
    error = refusal(moved, manifest, read_lock(manifest))
    assert says(error.message, f"{BASE_IMAGE} now names another image")
    assert says(error.message, f"config {moved.image_id_of(BASE_IMAGE)}")


def test_a_differing_base_under_another_reference_joins_its_differences_and_says_how_to_fix_it(manifest):
    lock = read_lock(manifest)
    other = engine_with_base(base_entries(MODULE + "# other\n"))
    other.tags[ELSEWHERE] = other.tags.pop(BASE_IMAGE)
    manifest.path.write_text(manifest.path.read_text().replace(BASE_IMAGE, ELSEWHERE))
    error = refusal(other, load_manifest(manifest.path), lock)
    assert says(error.message, f"the lock's {lock.base.config_digest[:19]}; diff_ids differ from the lock")
    assert says(error.fix, "load the exact base image that was locked") and says(error.fix, "run python build.py lock")


def test_the_containerd_store_identifies_the_base_by_the_manifest_of_its_own_reference(manifest):
    engine = engine_with_base()
    engine._profile = EngineProfile("26.1.5", "containerd", "overlayfs")
    lock = read_lock(manifest)
    store = StoreManifest(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                      "config": {"digest": lock.base.config_digest}, "layers": []}).encode())
    asked = []

    def store_manifest(image_id, reference, fetch=None):
        asked.append((image_id, reference))
        return store

    engine.store_manifest = store_manifest
    engine.config_digest_of = types.MethodType(Engine.config_digest_of, engine)  # the client's own rule: the manifest's config
    base = check_base(engine, manifest, lock)
    base_id = engine.image_id_of(BASE_IMAGE)
    assert base.store_manifest == store and asked == [(base_id, BASE_IMAGE), (base_id, BASE_IMAGE)]
