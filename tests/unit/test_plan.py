"""Tests of the plan: the three-way overlay comparison, the tag, determinism and the provenance labels."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from kvbake.digests import sha256_hex, tree_sha256
from kvbake.errors import IntegrityError
from kvbake.lock import Derived, LockedDir
from kvbake.bake.core.plan import check_plan_matches_lock, compare_three_ways, make_plan, plan_summary, read_overlay, tag_for
from kvbake.bake.core.provenance import base_digest, labels, switch_names
from tests.unit.helpers_manifest import EPOCH, locked_file, make_lock, minimal_document, tiny_manifest

OLD, NEW, OTHER = b"VALUE = 1\n", b"VALUE = 2\n", b"VALUE = 3\n"
OCI_KEYS = ("base.name", "base.digest", "created", "revision", "source", "version", "title", "licenses")
OWN_KEYS = ("format", "manifest.sha256", "lock.sha256", "chain", "donor.revision", "overlay.tree-sha256", "base.digest-kind",
            "base.config-digest", "switches", "switches.default", "forbidden")


def lock_for(tree: dict[str, bytes], **changes):
    files = tuple(locked_file(path, data, stale=(f"pkg/__pycache__/{Path(path).stem}.cpython-311.pyc",)) for path, data in sorted(tree.items()))
    values = dict(files=files, overlay_tree_sha256=tree_sha256((p, sha256_hex(b)) for p, b in tree.items()))
    values.update(changes)
    return make_lock(**values)


def test_three_ways_agree() -> None:
    tree = {"pkg/mod.py": NEW, "pkg/other.py": OLD}
    compare_three_ways(lock_for(tree), dict(tree), dict(tree))


@pytest.mark.parametrize(("rebuilt", "shipped", "locked", "culprit"), [
    (NEW, OTHER, NEW, "the shipped overlay/ differs from the rebuilt tree and the lock"),
    (OTHER, NEW, NEW, "the rebuilt tree differs from overlay/ and the lock"),
    (NEW, NEW, OTHER, "the lock differs from both the rebuilt tree and overlay/"),
    (NEW, OTHER, OLD, "all three differ"),
], ids=["overlay", "rebuilt", "lock", "all-three"])
def test_three_ways_name_the_culprit(rebuilt: bytes, shipped: bytes, locked: bytes, culprit: str) -> None:
    lock = lock_for({"pkg/mod.py": locked})
    with pytest.raises(IntegrityError) as caught:
        compare_three_ways(lock, {"pkg/mod.py": rebuilt}, {"pkg/mod.py": shipped})
    text = caught.value.one_line()
    assert text.startswith(f"pkg/mod.py: {culprit} (")
    assert f"rebuilt {sha256_hex(rebuilt)[:12]}…, overlay {sha256_hex(shipped)[:12]}…, lock {sha256_hex(locked)[:12]}…" in text
    assert caught.value.exit_code == 7


def test_three_ways_check_the_tree_hash_too() -> None:
    tree = {"pkg/mod.py": NEW}
    with pytest.raises(IntegrityError, match="the rebuilt overlay tree hash differs from the lock"):
        compare_three_ways(lock_for(tree, overlay_tree_sha256="0" * 64), dict(tree), dict(tree))


def test_read_overlay_reads_the_listed_files_and_names_a_missing_one(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    lock = lock_for({"pkg/mod.py": NEW, "pkg/gone.py": OLD})
    (tmp_path / "overlay" / "pkg").mkdir(parents=True)
    (tmp_path / "overlay" / "pkg" / "mod.py").write_bytes(NEW)
    with pytest.raises(IntegrityError, match="overlay/pkg/gone.py is missing"):
        read_overlay(manifest, lock)
    (tmp_path / "overlay" / "pkg" / "gone.py").write_bytes(OLD)
    assert read_overlay(manifest, lock) == {"pkg/mod.py": NEW, "pkg/gone.py": OLD}


def test_tag_for_uses_the_template(tmp_path: Path) -> None:
    document = minimal_document()
    document["output"]["tag"] = "{name}-{base_tag}-kvpack-{short_id}"
    manifest = tiny_manifest(tmp_path, document)
    lock = lock_for({"pkg/mod.py": NEW})
    assert tag_for(manifest, lock) == f"tiny-1-kvpack-{lock.core_sha256()[:12]}"


def test_the_tag_ignores_the_derived_section(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    lock = lock_for({"pkg/mod.py": NEW})
    assert tag_for(manifest, lock) == tag_for(manifest, lock.with_derived(Derived("sha256:" + "8" * 64, "sha256:" + "9" * 64)))
    assert tag_for(manifest, lock) != tag_for(manifest, lock_for({"pkg/mod.py": OTHER}))


def plan_inputs(tmp_path: Path, document=None):
    manifest = tiny_manifest(tmp_path, document or minimal_document())
    tree = {"pkg/mod.py": NEW, "pkg/fresh/helper.py": OTHER}
    dirs = (LockedDir("usr/lib/py/pkg", 0o775, 1000, 1000, 1_600_000_000),)
    lock = lock_for(tree, manifest_sha256=manifest.sha256, dirs=dirs, new_dirs=("pkg/fresh",))
    return manifest, lock, tree


def test_make_plan_is_deterministic(tmp_path: Path) -> None:
    manifest, lock, tree = plan_inputs(tmp_path)
    first, second = make_plan(manifest, lock, tree), make_plan(manifest, lock, dict(reversed(list(tree.items()))))
    assert first.layer.data == second.layer.data
    assert first.config_bytes == second.config_bytes
    assert first.image_id == second.image_id
    assert plan_summary(first) == plan_summary(second)


def test_make_plan_assembles_tag_reference_layer_and_config(tmp_path: Path) -> None:
    manifest, lock, tree = plan_inputs(tmp_path)
    plan = make_plan(manifest, lock, tree)
    assert plan.reference == f"127.0.0.1:5000/tiny:{plan.tag}"
    assert plan.tag == f"1-kvpack-{lock.core_sha256()[:12]}"
    config = json.loads(plan.config_bytes)
    assert config["rootfs"]["diff_ids"][-1] == plan.layer.diff_id
    assert config["config"]["Labels"]["org.kvbake.lock.sha256"] == lock.core_sha256()
    assert config["history"][-1]["created_by"] == "kvbake bake tiny: chain 0001"
    assert plan.whiteouts == ("usr/lib/py/pkg/__pycache__/helper.cpython-311.pyc", "usr/lib/py/pkg/__pycache__/mod.cpython-311.pyc")
    with tarfile.open(fileobj=io.BytesIO(plan.layer.data), mode="r:") as tar:
        by_name = {m.name.rstrip("/"): m for m in tar.getmembers()}
    assert set(by_name) == {"usr/lib/py/pkg", "usr/lib/py/pkg/fresh", "usr/lib/py/pkg/mod.py", "usr/lib/py/pkg/fresh/helper.py",
                            "usr/lib/py/pkg/__pycache__/.wh.mod.cpython-311.pyc", "usr/lib/py/pkg/__pycache__/.wh.helper.cpython-311.pyc"}
    assert (by_name["usr/lib/py/pkg"].mode, by_name["usr/lib/py/pkg"].mtime) == (0o775, 1_600_000_000)
    assert (by_name["usr/lib/py/pkg/fresh"].mode, by_name["usr/lib/py/pkg/fresh"].mtime) == (0o755, EPOCH)


def test_check_plan_matches_lock(tmp_path: Path) -> None:
    manifest, lock, tree = plan_inputs(tmp_path)
    with pytest.raises(IntegrityError) as caught:
        check_plan_matches_lock(make_plan(manifest, lock, tree))
    assert caught.value.exit_code == 7
    assert "assembled image" in caught.value.message and "sha256:" + "7" * 12 in caught.value.message
    assert "build.py lock" in caught.value.fix
    fixed = make_plan(manifest, lock, tree)
    check_plan_matches_lock(make_plan(manifest, lock.with_derived(fixed.derived()), tree))


def test_labels_carry_every_oci_and_own_key(tmp_path: Path) -> None:
    manifest, lock, _ = plan_inputs(tmp_path)
    result = labels(manifest, lock, "1-kvpack-abc")
    for key in OCI_KEYS:
        assert f"org.opencontainers.image.{key}" in result
    for key in OWN_KEYS:
        assert f"org.kvbake.{key}" in result
    assert result["org.opencontainers.image.base.name"] == "kvbake-test/tiny:1"
    assert result["org.opencontainers.image.version"] == "1-kvpack-abc"
    assert result["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z"
    assert result["org.opencontainers.image.revision"] == lock.donor_revision
    assert result["org.opencontainers.image.source"] == lock.donor_url
    assert result["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert result["org.kvbake.chain"] == f"0001:{lock.patches[0].sha256}"
    assert result["org.kvbake.manifest.sha256"] == manifest.sha256
    assert result["org.kvbake.switches"] == "TINY_OTHER,TINY_SWITCH"
    assert result["org.kvbake.forbidden"] == "TINY_BAD"
    assert all(isinstance(v, str) for v in result.values())


def test_labels_hold_no_host_path(tmp_path: Path) -> None:
    manifest, lock, _ = plan_inputs(tmp_path)
    values = labels(manifest, lock, "v").values()
    for forbidden in ("/tmp", str(Path.home()), str(tmp_path), "/root", "/home/"):
        assert not any(forbidden in value for value in values), forbidden


def test_the_standin_label_only_for_stand_ins(tmp_path: Path) -> None:
    manifest, lock, _ = plan_inputs(tmp_path / "standin")
    assert labels(manifest, lock, "v")["org.kvbake.standin"] == "true"
    assert labels(manifest, lock, "v")["org.opencontainers.image.title"] == "tiny (stand-in example)"
    document = minimal_document()
    document["standin"] = False
    real, real_lock, _ = plan_inputs(tmp_path / "real", document)
    assert "org.kvbake.standin" not in labels(real, real_lock, "v")
    assert labels(real, real_lock, "v")["org.opencontainers.image.title"] == "tiny"


def test_base_digest_prefers_the_registry_digest() -> None:
    assert base_digest(make_lock()) == ("sha256:" + "c" * 64, "config")
    assert base_digest(make_lock(repo_digest="sha256:" + "f" * 64)) == ("sha256:" + "f" * 64, "manifest")


def test_switch_names_are_declared_and_forbidden(tmp_path: Path) -> None:
    assert switch_names(tiny_manifest(tmp_path)) == ("TINY_BAD", "TINY_OTHER", "TINY_SWITCH")
