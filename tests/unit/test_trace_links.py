"""The chain of evidence, link by link: a link holds only when what was found again equals what was recorded."""

from __future__ import annotations

from dataclasses import replace

from kvbake.lock import Derived
from kvbake.provenance.core.trace import (Link, checked, donor_link, file_links, first_broken, image_links, manifest_links, patch_links,
                                          rank_links, table)
from tests.unit.helpers_manifest import locked_file, make_lock

DIGEST = "sha256:" + "9" * 64


def test_a_link_holds_only_when_both_sides_agree_and_names_both_values_when_not() -> None:
    assert checked("layer", "x", "the lock", "a", "the rebuild", "a") == Link("layer", "x", "a")
    broken = checked("layer", "x", "the lock", "a", "the rebuild", "b")
    assert not broken.holds and "the lock says a" in broken.broken and "the rebuild finds b" in broken.broken
    assert "finds nothing" in checked("layer", "x", "the lock", "a", "the rebuild", None).broken
    assert not checked("layer", "x", "the lock", None, "the rebuild", None).holds, "nothing on either side proves nothing"


def test_the_donor_link_compares_the_lock_with_the_manifest() -> None:
    lock = make_lock()
    assert donor_link(lock, lock.donor_url, lock.donor_revision).holds
    moved = donor_link(lock, lock.donor_url, "f" * 40)
    assert not moved.holds and lock.donor_revision in moved.broken and "f" * 40 in moved.broken


def test_each_patch_is_checked_by_its_sha256_and_its_patch_id() -> None:
    lock = make_lock()
    [patch] = lock.patches
    assert [link.holds for link in patch_links(lock, {patch.id: (patch.sha256, patch.patch_id)})] == [True]
    [changed] = patch_links(lock, {patch.id: (patch.sha256, "0" * 40)})
    assert not changed.holds and "0" * 40 in changed.broken and changed.name == patch.id
    [missing] = patch_links(lock, {})
    assert not missing.holds and patch.file in missing.broken


def test_each_file_needs_its_overlay_hash_and_the_base_the_chain_recovers() -> None:
    modified = locked_file("pkg/mod.py", b"after", base=b"before")
    created = locked_file("pkg/new.py", b"new", base=None)
    lock = make_lock(files=(modified, created))
    overlay = {"pkg/mod.py": modified.overlay_sha256, "pkg/new.py": created.overlay_sha256}
    recovered = {"pkg/mod.py": modified.base_sha256}
    assert [link.holds for link in file_links(lock, overlay, recovered)] == [True, True]
    drifted = file_links(lock, {**overlay, "pkg/mod.py": "e" * 64}, recovered)
    assert [link.holds for link in drifted] == [False, True] and "e" * 64 in drifted[0].broken
    unrecoverable = file_links(lock, overlay, {})
    assert [link.holds for link in unrecoverable] == [False, True]


def test_the_layer_and_the_config_are_rebuilt_and_compared() -> None:
    lock = make_lock()
    assert all(link.holds for link in image_links(lock, lock.derived.layer_diff_id, lock.derived.image_id))
    layer, config = image_links(lock, lock.derived.layer_diff_id, DIGEST)
    assert layer.holds and not config.holds and DIGEST in config.broken


def test_the_pushed_manifest_must_be_the_registry_s_and_name_the_locked_config() -> None:
    lock = make_lock()
    pinned = f"127.0.0.1:5000/x@{DIGEST}"
    assert all(link.holds for link in manifest_links(lock, pinned, DIGEST, lock.derived.image_id))
    retagged, other_config = manifest_links(lock, pinned, "sha256:" + "8" * 64, "sha256:" + "1" * 64)
    assert not retagged.holds and DIGEST in retagged.broken
    assert not other_config.holds and lock.derived.image_id in other_config.broken
    assert not manifest_links(lock, None, DIGEST, lock.derived.image_id)[0].holds, "no push record, no link"


def test_ranks_carry_verify_running_s_findings_and_the_first_broken_link_is_named() -> None:
    links = rank_links({"spark-b": ["label k differs"], "spark-a": []}, DIGEST)
    assert [(link.name, link.holds) for link in links] == [("spark-a", True), ("spark-b", False)]
    assert first_broken(links).name == "spark-b" and first_broken(links[:1]) is None
    lines = table(links).splitlines()
    assert lines[0].endswith("ok") and "BROKEN: label k differs" in lines[1]


def test_a_lock_whose_derived_section_is_pending_breaks_both_image_links() -> None:
    lock = replace(make_lock(), derived=Derived("", ""))
    assert [link.holds for link in image_links(lock, "sha256:a", "sha256:b")] == [False, False]


def test_the_table_shortens_hashes_but_a_broken_link_keeps_both_values_whole() -> None:
    whole, other = "a" * 64, "b" * 64
    links = [Link("layer", "x", f"sha256:{whole}"), checked("config", "y", "the lock", f"sha256:{whole}", "the rebuild", f"sha256:{other}")]
    first, second = table(links).splitlines()
    assert f"sha256:{'a' * 12}…" in first and whole not in first
    assert second.count(whole) == 1 and other in second
