"""Exact-value tests of plan.py that the mutation run showed were missing: the plan summary, labels, every disagreement."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kvbake.digests import sha256_hex, tree_sha256
from kvbake.errors import IntegrityError
from kvbake.bake.core.thin_layer import LayerDir, LayerFile
from kvbake.lock import Derived, LockedDir, LockedPatch, PatchFileHashes
from kvbake.bake.core.plan import (check_plan_matches_lock, compare_three_ways, layer_dirs, layer_files, make_plan, plan_summary,
                         read_overlay, whiteouts)
from tests.unit.helpers_manifest import BASE_DIFF_IDS, EPOCH, locked_file, make_lock, tiny_manifest
from tests.unit.message_words import says

OLD, NEW, OTHER = b"VALUE = 1\n", b"VALUE = 2\n", b"VALUE = 3\n"


def lock_for(tree: dict[str, bytes], **changes):
    files = tuple(locked_file(path, data, mode=0o640, uid=7, gid=8, stale=(f"pkg/__pycache__/{Path(path).stem}.cpython-311.pyc",
                                                                           f"pkg/__pycache__/{Path(path).stem}.cpython-311.opt-1.pyc"))
                  for path, data in sorted(tree.items()))
    values = dict(files=files, overlay_tree_sha256=tree_sha256((p, sha256_hex(b)) for p, b in tree.items()))
    values.update(changes)
    return make_lock(**values)


def planned(tmp_path: Path):
    manifest = tiny_manifest(tmp_path)
    tree = {"pkg/mod.py": NEW, "pkg/fresh/helper.py": OTHER}
    lock = lock_for(tree, manifest_sha256=manifest.sha256, dirs=(LockedDir("usr/lib/py/pkg", 0o775, 1000, 1001, 1_600_000_000),),
                    new_dirs=("pkg/fresh",))
    return manifest, lock, tree, make_plan(manifest, lock, tree)


def test_the_plan_summary_is_exactly_this_document(tmp_path: Path) -> None:
    manifest, lock, tree, plan = planned(tmp_path)
    assert plan_summary(plan) == {
        "manifest": "manifest.yaml", "name": "tiny", "standin": True,
        "base": {"reference": "kvbake-test/tiny:1", "config_digest": "sha256:" + "c" * 64, "diff_ids": list(BASE_DIFF_IDS),
                 "platform": "linux/amd64"},
        "chain": [{"id": "0001", "sha256": "2" * 64, "patch_id": "3" * 40, "files": ["pkg/mod.py"]}],
        "files": [{"path": "pkg/fresh/helper.py", "before": sha256_hex(b"old\n"), "after": sha256_hex(OTHER), "mode": "0o640", "owner": "7:8"},
                  {"path": "pkg/mod.py", "before": sha256_hex(b"old\n"), "after": sha256_hex(NEW), "mode": "0o640", "owner": "7:8"}],
        "whiteouts": ["usr/lib/py/pkg/__pycache__/helper.cpython-311.opt-1.pyc", "usr/lib/py/pkg/__pycache__/helper.cpython-311.pyc",
                      "usr/lib/py/pkg/__pycache__/mod.cpython-311.opt-1.pyc", "usr/lib/py/pkg/__pycache__/mod.cpython-311.pyc"],
        "new_dirs": ["pkg/fresh"],
        "layer_diff_id": plan.layer.diff_id, "image_id": plan.image_id, "tag": f"1-kvpack-{lock.core_sha256()[:12]}",
        "reference": f"127.0.0.1:5000/tiny:1-kvpack-{lock.core_sha256()[:12]}", "labels": dict(plan.labels), "switches_in_env": [],
    }


def test_layer_inputs_come_from_the_lock_with_the_tree_bytes(tmp_path: Path) -> None:
    _, lock, tree, plan = planned(tmp_path)
    assert layer_files(lock, tree) == [LayerFile("usr/lib/py/pkg/fresh/helper.py", OTHER, 0o640, 7, 8),
                                       LayerFile("usr/lib/py/pkg/mod.py", NEW, 0o640, 7, 8)]
    assert layer_dirs(lock) == [LayerDir("usr/lib/py/pkg", 0o775, 1000, 1001, 1_600_000_000), LayerDir("usr/lib/py/pkg/fresh", 0o755, 0, 0, EPOCH)]
    assert whiteouts(lock) == list(plan.whiteouts)
    assert plan.tree == tree


def test_the_plan_derives_its_lock_section_from_its_own_layer_and_image(tmp_path: Path) -> None:
    _, _, _, plan = planned(tmp_path)
    assert plan.derived() == Derived(layer_diff_id=plan.layer.diff_id, image_id=plan.image_id)


@pytest.mark.parametrize(("base_runtime", "labels"), [
    ({"Labels": {"maintainer": "base team", "org.kvbake.format": "0"}}, {"maintainer": "base team"}),
    ({"Labels": None}, {}),
    ({}, {}),
    (None, {}),
])
def test_the_image_labels_are_the_bases_overlaid_with_kvbakes(tmp_path: Path, base_runtime, labels: dict[str, str]) -> None:
    _, lock, _, plan = planned(tmp_path)
    config = {**lock.base.config, "config": base_runtime}
    with_base = dataclasses.replace(plan, lock=dataclasses.replace(lock, base=dataclasses.replace(lock.base, config=config)))
    assert with_base.image_labels() == {**labels, **plan.labels}
    assert with_base.image_labels()["org.kvbake.format"] == "1"


def test_a_missing_overlay_file_is_named_with_the_fix(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    with pytest.raises(IntegrityError) as caught:
        read_overlay(manifest, lock_for({"pkg/mod.py": NEW}))
    assert (caught.value.message, caught.value.fix) == ("overlay/pkg/mod.py is missing", "run python build.py lock to regenerate overlay/")


def disagreement(rebuilt: dict, shipped: dict, lock) -> tuple[str, str | None]:
    with pytest.raises(IntegrityError) as caught:
        compare_three_ways(lock, rebuilt, shipped)
    assert type(caught.value) is IntegrityError
    return caught.value.message, caught.value.fix


@pytest.mark.parametrize(("rebuilt", "shipped", "locked", "odd", "fix"), [
    (NEW, OTHER, NEW, "the shipped overlay/ differs from the rebuilt tree and the lock",
     "restore overlay/ from the rebuild (python build.py lock) or from version control"),
    (OTHER, NEW, NEW, "the rebuilt tree differs from overlay/ and the lock", "the chain or base changed; review and re-lock"),
    (NEW, NEW, OTHER, "the lock differs from both the rebuilt tree and overlay/", "review the change and run python build.py lock"),
    (NEW, OTHER, OLD, "all three differ", "review the change and run python build.py lock"),
])
def test_each_disagreement_names_its_culprit_and_fix_after_an_agreeing_file(rebuilt, shipped, locked, odd, fix) -> None:
    lock = lock_for({"pkg/a.py": OLD, "pkg/b.py": locked})
    message = (f"pkg/b.py: {odd} (rebuilt {sha256_hex(rebuilt)[:12]}…, overlay {sha256_hex(shipped)[:12]}…, "
               f"lock {sha256_hex(locked)[:12]}…)")
    assert disagreement({"pkg/a.py": OLD, "pkg/b.py": rebuilt}, {"pkg/a.py": OLD, "pkg/b.py": shipped}, lock) == (message, fix)


def test_a_tree_hash_that_differs_is_named_with_its_fix() -> None:
    tree = {"pkg/mod.py": NEW}
    assert disagreement(dict(tree), dict(tree), lock_for(tree, overlay_tree_sha256="0" * 64)) == (
        "the rebuilt overlay tree hash differs from the lock", "run python build.py lock")


def test_an_extra_rebuilt_file_changes_the_tree_hash() -> None:
    tree = {"pkg/mod.py": NEW}
    assert disagreement({**tree, "pkg/extra.py": OLD}, dict(tree), lock_for(tree)) == (
        "the rebuilt overlay tree hash differs from the lock", "run python build.py lock")


def test_a_plan_that_differs_from_its_lock_names_both_ids(tmp_path: Path) -> None:
    _, _, _, plan = planned(tmp_path)
    with pytest.raises(IntegrityError) as caught:
        check_plan_matches_lock(plan)
    assert caught.value.exit_code == 7
    assert plan.image_id[:19] in caught.value.message and f"sha256:{'7' * 12}" in caught.value.message
    assert says(caught.value.message, f"the assembled image {plan.image_id[:19]}")
    assert says(caught.value.message, f"the lock's {plan.lock.derived.image_id[:19]}")
    assert "build.py lock" in caught.value.fix
    right_image_wrong_layer = dataclasses.replace(plan, lock=plan.lock.with_derived(Derived("sha256:" + "0" * 64, plan.image_id)))
    with pytest.raises(IntegrityError):
        check_plan_matches_lock(right_image_wrong_layer)
    check_plan_matches_lock(dataclasses.replace(plan, lock=plan.lock.with_derived(plan.derived())))


def test_the_config_names_the_whole_chain_the_fixed_created_time_and_the_tag_as_version(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    tree = {"pkg/mod.py": NEW}
    chain = tuple(LockedPatch(number, f"patches/{number}-tiny.patch", "2" * 64, "3" * 40, (PatchFileHashes("pkg/mod.py", "modify", "4" * 64, "5" * 64),))
                  for number in ("0001", "0002"))
    plan = make_plan(manifest, lock_for(tree, manifest_sha256=manifest.sha256, patches=chain), tree)
    config = json.loads(plan.config_bytes)
    assert config["history"][-1] == {"created": "2023-11-14T22:13:20Z", "created_by": "kvbake bake tiny: chain 0001 0002",
                                     "comment": "kvbake thin layer"}
    assert config["created"] == "2023-11-14T22:13:20Z"
    assert plan.labels["org.opencontainers.image.version"] == plan.tag
