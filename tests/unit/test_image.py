"""Tests of the derived image config and the classic store's thin load archive (Docker manifest.json)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

from kvbake.bake.core.derived_image import (
    archive_members,
    derived_config,
    image_id,
    rfc3339,
    write_archive,
)
from tests.unit.helpers_manifest import BASE_DIFF_IDS, base_config

THIN = b"thin layer tar bytes"
THIN_DIFF_ID = "sha256:" + hashlib.sha256(THIN).hexdigest()
LABELS = {"org.kvbake.format": "1", "org.opencontainers.image.title": "tiny"}
CREATED = "2023-11-14T22:13:20Z"


def derived() -> dict:
    return json.loads(derived_config(base_config(), THIN_DIFF_ID, LABELS, CREATED, "kvbake bake tiny: chain 0001"))


def blob(digest: str) -> str:
    return "blobs/sha256/" + digest.split(":", 1)[1]


def test_rfc3339_is_utc_with_a_z() -> None:
    assert rfc3339(1_700_000_000) == CREATED
    assert rfc3339(0) == "1970-01-01T00:00:00Z"


def test_derived_config_keeps_the_runtime_settings_of_the_base() -> None:
    base, config = base_config()["config"], derived()["config"]
    for key in ("Env", "Entrypoint", "Cmd", "WorkingDir", "User"):
        assert config[key] == base[key]


def test_derived_config_adds_labels_and_keeps_the_base_ones() -> None:
    assert derived()["config"]["Labels"] == {"maintainer": "base team", **LABELS}


def test_derived_config_works_when_the_base_has_no_labels_or_runtime_config() -> None:
    for runtime in (None, {}, {"Labels": None}):
        base = {**base_config(), "config": runtime}
        config = json.loads(derived_config(base, THIN_DIFF_ID, LABELS, CREATED, "x"))
        assert config["config"]["Labels"] == LABELS


def test_derived_config_appends_the_layer_and_exactly_one_history_entry() -> None:
    config = derived()
    assert config["rootfs"] == {"type": "layers", "diff_ids": [*BASE_DIFF_IDS, THIN_DIFF_ID]}
    assert config["history"][:-1] == base_config()["history"]
    assert len(config["history"]) == len(base_config()["history"]) + 1
    assert config["history"][-1] == {"created": CREATED, "created_by": "kvbake bake tiny: chain 0001", "comment": "kvbake thin layer"}
    assert config["created"] == CREATED


def test_derived_config_drops_the_container_keys() -> None:
    config = derived()
    assert "container" not in config
    assert "container_config" not in config
    assert (config["os"], config["architecture"]) == ("linux", "amd64")


def test_derived_config_does_not_change_its_input() -> None:
    base = base_config()
    derived_config(base, THIN_DIFF_ID, LABELS, CREATED, "x")
    assert base == base_config()


def test_derived_config_is_canonical_bytes() -> None:
    data = derived_config(base_config(), THIN_DIFF_ID, LABELS, CREATED, "x")
    assert data == json.dumps(json.loads(data), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    reordered = dict(reversed(list(base_config().items())))
    assert derived_config(reordered, THIN_DIFF_ID, dict(reversed(list(LABELS.items()))), CREATED, "x") == data


def test_image_id_is_the_sha256_of_the_config_bytes() -> None:
    data = derived_config(base_config(), THIN_DIFF_ID, LABELS, CREATED, "x")
    assert image_id(data) == "sha256:" + hashlib.sha256(data).hexdigest()


def test_archive_lists_the_base_layers_but_carries_only_the_thin_blob() -> None:
    config = derived_config(base_config(), THIN_DIFF_ID, LABELS, CREATED, "x")
    members = dict(archive_members(config, list(BASE_DIFF_IDS), THIN))
    assert set(members) == {blob(image_id(config)), blob(THIN_DIFF_ID), "manifest.json"}
    assert members[blob(image_id(config))] == config
    assert members[blob(THIN_DIFF_ID)] == THIN
    manifest = json.loads(members["manifest.json"])
    assert manifest == [{"Config": blob(image_id(config)), "RepoTags": None, "Layers": [*(blob(d) for d in BASE_DIFF_IDS), blob(THIN_DIFF_ID)]}]


def test_archive_members_are_sorted() -> None:
    config = derived_config(base_config(), THIN_DIFF_ID, LABELS, CREATED, "x")
    names = [name for name, _ in archive_members(config, list(BASE_DIFF_IDS), THIN)]
    assert names == sorted(names)


def test_write_archive_is_deterministic_and_keeps_the_members() -> None:
    config = derived_config(base_config(), THIN_DIFF_ID, LABELS, CREATED, "x")
    members = archive_members(config, list(BASE_DIFF_IDS), THIN)
    first, second = io.BytesIO(), io.BytesIO()
    write_archive(first, members, 1_700_000_000)
    write_archive(second, members, 1_700_000_000)
    assert first.getvalue() == second.getvalue()
    with tarfile.open(fileobj=io.BytesIO(first.getvalue()), mode="r:") as tar:
        read = [(m.name, tar.extractfile(m).read(), m.mtime) for m in tar.getmembers()]
    assert read == [(name, data, 1_700_000_000) for name, data in members]
