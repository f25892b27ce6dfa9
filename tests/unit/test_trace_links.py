"""The chain of evidence, link by link: a link holds only when what was found again equals what was recorded."""

from __future__ import annotations

from dataclasses import replace

from kvbake.lock import Derived
from kvbake.attest.core.admission import SLSA_V02
from kvbake.provenance.core.trace import (Link, attestation_link, checked, donor_link, file_links, first_broken, image_links, manifest_links,
                                          patch_links, rank_links, recorded_digest, short, signature_link, table)
from tests.unit.helpers_manifest import locked_file, make_lock

from message_words import says

DIGEST = "sha256:" + "9" * 64
MATERIALS = [{"uri": "docker-image://base", "digest": {"sha256": "11" * 32}}, {"uri": "patch:a.patch", "digest": {"sha256": "22" * 32}}]


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


def test_a_link_as_json_carries_its_kind_name_value_and_whether_it_holds() -> None:
    assert Link("layer", "x", "a").as_dict() == {"kind": "layer", "name": "x", "value": "a", "holds": True, "broken": None}
    assert Link("rank", "n", "v", "differs").as_dict() == {"kind": "rank", "name": "n", "value": "v", "holds": False, "broken": "differs"}


def test_a_broken_link_carries_whichever_value_was_there_and_names_a_missing_one() -> None:
    only_found = checked("layer", "x", "the lock", None, "the rebuild", "b")
    assert only_found.value == "b" and says(only_found.broken, "the lock says nothing") and says(only_found.broken, "finds b")
    only_claimed = checked("layer", "x", "the lock", "a", "the rebuild", None)
    assert only_claimed.value == "a" and says(only_claimed.broken, "the rebuild finds nothing")
    assert checked("layer", "x", "the lock", None, "the rebuild", None).value == ""
    assert checked("layer", "x", "the lock", "a", "the rebuild", "b").value == "a", "the recorded value first"


def test_the_donor_link_names_the_lock_and_the_manifest_as_its_two_sources() -> None:
    lock = make_lock()
    moved = donor_link(lock, "https://elsewhere.invalid/x.git", lock.donor_revision)
    assert (moved.kind, moved.name) == ("donor", "commit")
    assert says(moved.broken, f"the lock says {lock.donor_url}@{lock.donor_revision}")
    assert says(moved.broken, f"manifest.yaml finds https://elsewhere.invalid/x.git@{lock.donor_revision}")


def test_a_patch_link_names_the_lock_and_the_patch_file() -> None:
    lock = make_lock()
    [patch] = lock.patches
    [changed] = patch_links(lock, {patch.id: ("8" * 64, patch.patch_id)})
    assert changed.kind == "patch" and says(changed.broken, "the lock says") and says(changed.broken, f"{patch.file} finds sha256 {'8' * 64}")


def test_a_file_link_finds_nothing_when_its_overlay_file_or_its_recovered_base_is_missing() -> None:
    modified = locked_file("pkg/mod.py", b"after", base=b"before")
    lock = make_lock(files=(modified,))
    whole = {"pkg/mod.py": modified.overlay_sha256}
    recovered = {"pkg/mod.py": modified.base_sha256}
    [no_base] = file_links(lock, whole, {})
    [no_overlay] = file_links(lock, {}, recovered)
    for link in (no_base, no_overlay):
        assert link.kind == "file" and link.name == "pkg/mod.py" and not link.holds
        assert says(link.broken, "the lock says") and says(link.broken, "overlay/ and the chain taken back out finds nothing")
    [drifted] = file_links(lock, whole, {"pkg/mod.py": "e" * 64})
    assert says(drifted.broken, f"finds base {'e' * 64} → after {modified.overlay_sha256}")


def test_a_file_the_chain_creates_has_no_base_to_recover() -> None:
    created = locked_file("pkg/new.py", b"new", base=None)
    lock = make_lock(files=(created,))
    [link] = file_links(lock, {"pkg/new.py": created.overlay_sha256}, {"pkg/new.py": "e" * 64})
    assert link.holds and link.value == f"base none → after {created.overlay_sha256}"


def test_the_image_links_name_the_lock_and_what_was_rebuilt() -> None:
    lock = make_lock()
    layer, config = image_links(lock, DIGEST, DIGEST)
    assert (layer.kind, layer.name, config.kind, config.name) == ("layer", "thin layer diff_id", "config", "image config digest")
    assert says(layer.broken, f"the lock says {lock.derived.layer_diff_id}") and says(layer.broken, f"the layer rebuilt from overlay/ finds {DIGEST}")
    assert says(config.broken, f"the lock says {lock.derived.image_id}") and says(config.broken, f"the config assembled again finds {DIGEST}")


def test_the_manifest_links_name_the_push_record_the_registry_and_the_lock() -> None:
    lock = make_lock()
    other = "sha256:" + "8" * 64
    pushed, config = manifest_links(lock, f"127.0.0.1:5000/x@{DIGEST}", other, other)
    assert (pushed.kind, pushed.name) == ("manifest", "pushed manifest digest")
    assert (config.kind, config.name) == ("manifest", "config the registry's manifest names")
    assert says(pushed.broken, f"the push record says {DIGEST}") and says(pushed.broken, f"the registry finds {other}")
    assert says(config.broken, f"the lock says {lock.derived.image_id}") and says(config.broken, f"the registry's manifest finds {other}")


def test_the_recorded_digest_is_everything_after_the_first_at_sign() -> None:
    assert recorded_digest(f"r/x@{DIGEST}") == DIGEST and recorded_digest(f"r/x@{DIGEST}@more") == f"{DIGEST}@more"
    assert [recorded_digest(pinned) for pinned in ("r/x:1", "", None)] == [None, None, None]
    lock = make_lock()
    [pushed, _] = manifest_links(lock, f"r/x@{DIGEST}@more", f"{DIGEST}@more", lock.derived.image_id)
    assert pushed.holds and pushed.value == f"{DIGEST}@more"


def test_a_rank_link_joins_its_findings_one_after_another() -> None:
    [link] = rank_links({"spark-a": ["label k differs", "switch S is 1"]}, DIGEST)
    assert (link.kind, link.name, link.value) == ("rank", "spark-a", DIGEST)
    assert link.broken.split("; ") == ["label k differs", "switch S is 1"]


def test_the_table_lines_up_the_names_after_the_longest_kind_and_is_empty_without_links() -> None:
    links = [Link("file", "a", "v1"), Link("config", "bb", "v2"), Link("rank", "ccc", "v3", "down")]
    lines = table(links).splitlines()
    assert [line.index(name) for line, name in zip(lines, ("a", "bb", "ccc"))] == [8, 8, 8]
    assert [line.index(value) for line, value in zip(lines, ("v1", "v2", "v3"))] == [13, 13, 13]
    assert lines[2].endswith("BROKEN: down")
    assert table([]) == ""


def test_short_cuts_only_long_hex_runs() -> None:
    assert short("sha256:" + "0123456789ab" * 4) == "sha256:0123456789ab…"
    assert short("a" * 39) == "a" * 39, "a git commit (40 hex digits) is the shortest that is cut"
    assert short("a" * 40) == "a" * 12 + "…"
    assert short("patch-id " + "A" * 40) == "patch-id " + "A" * 40, "upper case is no hash"


CONFIG = "sha256:" + "c" * 64


def statement(subject: str = DIGEST, materials=MATERIALS, config: str = CONFIG, kind: str = SLSA_V02) -> dict:
    return {"subject": [{"name": "r", "digest": {"sha256": subject.split(":")[1]}}], "predicateType": kind,
            "predicate": {"materials": materials, "invocation": {"parameters": {"configDigest": config}}}}


def test_a_signature_link_holds_when_the_signatures_sign_exactly_the_digest() -> None:
    link = signature_link("alice.pub", DIGEST, [{"critical": {"image": {"docker-manifest-digest": DIGEST}}}])
    assert link == Link("signature", "alice.pub", DIGEST)


def test_a_signature_link_over_another_digest_names_every_digest_signed() -> None:
    other = "sha256:" + "8" * 64
    link = signature_link("alice.pub", DIGEST, [{"critical": {"image": {"docker-manifest-digest": d}}} for d in (DIGEST, other)])
    assert (link.kind, link.name, link.value) == ("signature", "alice.pub", DIGEST) and not link.holds
    assert says(link.broken, f"the registry says {DIGEST}") and says(link.broken, f"the signature by alice.pub finds {other}, {DIGEST}")
    empty = signature_link("alice.pub", DIGEST, [])
    assert says(empty.broken, "the signature by alice.pub finds nothing")


def test_a_signature_link_cosign_refused_carries_cosigns_reason() -> None:
    link = signature_link("alice.pub", DIGEST, "no matching signatures")
    assert (link.kind, link.name, link.value) == ("signature", "alice.pub", DIGEST)
    assert not link.holds and "alice.pub" in link.broken and link.broken.endswith(": no matching signatures")


def test_an_attestation_link_holds_when_a_statement_of_the_digest_holds_the_locks_materials() -> None:
    other = "sha256:" + "8" * 64
    link = attestation_link("alice.pub", DIGEST, CONFIG, [statement(subject=other, materials=[]), statement()], MATERIALS)
    assert link == Link("attestation", "alice.pub", f"{DIGEST} (2 materials)")


def test_an_attestation_link_with_other_materials_names_both_lists() -> None:
    changed = [MATERIALS[0]]
    link = attestation_link("alice.pub", DIGEST, CONFIG, [statement(materials=changed)], MATERIALS)
    assert (link.kind, link.name, link.value) == ("attestation", "alice.pub", f"{DIGEST} (2 materials)") and not link.holds
    assert says(link.broken, "the lock says docker-image://base") and "patch:a.patch" in link.broken
    assert says(link.broken, "the attestation by alice.pub finds docker-image://base")
    empty = attestation_link("alice.pub", DIGEST, CONFIG, [statement(materials=None)], MATERIALS)
    assert says(empty.broken, "the attestation by alice.pub finds nothing")


def test_an_attestation_link_without_a_statement_of_the_digest_or_refused_by_cosign_is_broken() -> None:
    other = "sha256:" + "8" * 64
    none = attestation_link("alice.pub", DIGEST, CONFIG, [statement(subject=other)], MATERIALS)
    assert (none.kind, none.name, none.value) == ("attestation", "alice.pub", DIGEST)
    assert not none.holds and DIGEST in none.broken and "alice.pub" in none.broken
    assert not attestation_link("alice.pub", DIGEST, CONFIG, [], MATERIALS).holds
    refused = attestation_link("alice.pub", DIGEST, CONFIG, "no matching attestations", MATERIALS)
    assert (refused.kind, refused.name, refused.value) == ("attestation", "alice.pub", DIGEST)
    assert not refused.holds and "alice.pub" in refused.broken and refused.broken.endswith(": no matching attestations")


def test_an_attestation_link_is_judged_by_every_statement_of_the_digest_in_any_order() -> None:
    """The deploy's check: another image's config digest, or a statement that is not SLSA provenance, breaks the link
    wherever it stands among the statements."""
    for bad, said in ((statement(config="sha256:" + "d" * 64), "states config sha256:" + "d" * 64),
                      (statement(kind="https://example.com/other"), "is a https://example.com/other")):
        for order in ([statement(), bad], [bad, statement()]):
            link = attestation_link("alice.pub", DIGEST, CONFIG, order, MATERIALS)
            assert not link.holds and link.broken.startswith("the attestation by alice.pub: ") and said in link.broken, link
