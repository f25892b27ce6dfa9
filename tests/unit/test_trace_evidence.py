"""trace's links to the registry, to cosign's verification with each key, and to every rank, over stand-ins for each."""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbake.bake.core.plan import tag_for
from kvbake.errors import RegistryError, RolloutError, SignatureError
from kvbake.lock import Derived, read_lock
from kvbake.manifest import Manifest, load_manifest
from kvbake.attest.adapters import cosign
from kvbake.provenance.adapters import evidence
from kvbake.attest.core.admission import SLSA_V02
from kvbake.attest.core.slsa import PREDICATE_TYPE, provenance_predicate
from kvbake.registry.adapters import credentials, registry_api
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.push_record import PUSHES_DIR
from kvbake.registry.core.remote_manifest import RemoteManifest

from fake_fleet import CONTROL, PACKING, make_world
from message_words import says

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
REPOSITORY = "127.0.0.1:5000/kvbake/standin-kvpack"
DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "ef" * 32
OCI = "application/vnd.oci.image.manifest.v1+json"


@pytest.fixture()
def standin(tmp_path: Path) -> Manifest:
    root = tmp_path / "standin"
    shutil.copytree(STANDIN, root, ignore=shutil.ignore_patterns(".kvbake", "overlay"))
    return load_manifest(root / "manifest.yaml")


def record_push(manifest: Manifest, pinned: str) -> str:
    """A push record for the locked release; its tag."""
    tag = tag_for(manifest, read_lock(manifest))
    (manifest.root / PUSHES_DIR).mkdir(parents=True, exist_ok=True)
    (manifest.root / PUSHES_DIR / f"{tag}.json").write_text(json.dumps({"pinned": pinned}))
    return tag


class StandInRegistry:
    """The registry's answer per (name, tag), or the error it fails with; what was asked, with which credentials."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, served: dict[tuple[str, str], RemoteManifest], fails: Exception | None = None) -> None:
        self.served, self.fails, self.opened, self.asked = served, fails, [], []
        monkeypatch.setattr(registry_api, "RegistryClient", self.client)
        monkeypatch.setattr(credentials, "credentials_for", lambda registry: f"login for {registry}")

    def client(self, registry: str, auth) -> StandInRegistry:
        self.opened.append((registry, auth))
        return self

    def __enter__(self) -> StandInRegistry:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def manifest(self, name: str, tag: str) -> RemoteManifest | None:
        self.asked.append((name, tag))
        if self.fails is not None:
            raise self.fails
        return self.served.get((name, tag))


def served(digest: str, config: str) -> RemoteManifest:
    return RemoteManifest(digest, OCI, {"config": {"digest": config}})


def test_the_registry_links_read_the_release_tag_back_with_the_registry_s_credentials(standin, monkeypatch):
    lock = read_lock(standin)
    tag = record_push(standin, f"{REPOSITORY}@{DIGEST}")
    registry = StandInRegistry(monkeypatch, {("kvbake/standin-kvpack", tag): served(DIGEST, lock.derived.image_id)})
    links = evidence.registry_links(standin, lock)
    assert [(link.kind, link.name, link.value, link.holds) for link in links] == [
        ("manifest", "pushed manifest digest", DIGEST, True), ("manifest", "config the registry's manifest names", lock.derived.image_id, True)]
    assert registry.opened == [("127.0.0.1:5000", "login for 127.0.0.1:5000")] and registry.asked == [("kvbake/standin-kvpack", tag)]


def test_a_retagged_release_breaks_both_registry_links_with_the_served_values(standin, monkeypatch):
    lock = read_lock(standin)
    tag = record_push(standin, f"{REPOSITORY}@{DIGEST}")
    StandInRegistry(monkeypatch, {("kvbake/standin-kvpack", tag): served(OTHER, "sha256:" + "12" * 32)})
    pushed, config = evidence.registry_links(standin, lock)
    assert not pushed.holds and says(pushed.broken, f"the registry finds {OTHER}") and DIGEST in pushed.broken
    assert not config.holds and "sha256:" + "12" * 32 in config.broken


def test_a_tag_the_registry_does_not_serve_breaks_both_links(standin, monkeypatch):
    lock = read_lock(standin)
    record_push(standin, f"{REPOSITORY}@{DIGEST}")
    StandInRegistry(monkeypatch, {})
    pushed, config = evidence.registry_links(standin, lock)
    assert (pushed.value, config.value) == (DIGEST, lock.derived.image_id)
    assert says(pushed.broken, "the registry finds nothing") and says(config.broken, "the registry's manifest finds nothing")


def test_a_registry_that_fails_gives_one_broken_link_naming_its_error(standin, monkeypatch):
    lock = read_lock(standin)
    record_push(standin, f"{REPOSITORY}@{DIGEST}")
    StandInRegistry(monkeypatch, {}, RegistryError("registry 127.0.0.1:5000 answered 503", "wait"))
    [link] = evidence.registry_links(standin, lock)
    assert (link.kind, link.name, link.value, link.holds) == ("manifest", "pushed manifest digest", DIGEST, False)
    assert says(link.broken, f"the push record says {DIGEST}") and "(registry 127.0.0.1:5000 answered 503)" in link.broken
    assert says(link.broken, "finds nothing")


def test_without_a_push_record_the_registry_links_are_broken_whatever_it_serves(standin, monkeypatch):
    lock = read_lock(standin)
    StandInRegistry(monkeypatch, {}, RegistryError("registry down", "wait"))
    [link] = evidence.registry_links(standin, lock)
    assert link.value == "" and says(link.broken, "the push record says nothing")
    tag = tag_for(standin, lock)
    StandInRegistry(monkeypatch, {("kvbake/standin-kvpack", tag): served(DIGEST, lock.derived.image_id)})
    pushed, config = evidence.registry_links(standin, lock)
    assert not pushed.holds and pushed.value == DIGEST and config.holds


def test_a_push_record_that_is_not_utf_8_json_gives_none(tmp_path):
    (tmp_path / "latin.json").write_bytes('{"pinned": "r/x@sha256:é"}'.encode("latin-1"))
    (tmp_path / "utf8.json").write_bytes('{"pinned": "r/é@sha256:1"}'.encode("utf-8"))
    assert evidence.pushed_digest(tmp_path / "latin.json") is None
    assert evidence.pushed_digest(tmp_path / "utf8.json") == "r/é@sha256:1"


def test_a_missing_patch_file_is_found_as_none_and_the_later_patches_are_still_read(standin):
    first, *rest = standin.chain
    first.path.unlink()
    facts = evidence.patch_facts(standin)
    assert facts[first.id] is None and len(facts) == len(standin.chain)
    assert all(facts[patch.id] is not None for patch in rest)


def test_without_every_overlay_file_the_image_links_find_nothing(standin):
    lock = read_lock(standin)
    layer, config = evidence.local_links(standin, lock)[-2:]
    assert (layer.kind, config.kind) == ("layer", "config")
    for link, recorded in ((layer, lock.derived.layer_diff_id), (config, lock.derived.image_id)):
        assert link.value == recorded and says(link.broken, "finds nothing")


def test_a_pending_derived_section_without_every_overlay_file_proves_no_image_link(standin):
    lock = replace(read_lock(standin), derived=Derived("", ""))
    layer, config = evidence.local_links(standin, lock)[-2:]
    assert not layer.holds and not config.holds


def test_the_manifest_link_is_checked_the_way_the_lock_s_format_pins_it(standin):
    lock = read_lock(standin)
    first = evidence.local_links(standin, lock)[0]
    assert (first.kind, first.name, first.holds) == ("donor", "manifest image sections", True)
    older = replace(lock, format=1, manifest_sha256=standin.sha256)
    assert evidence.local_links(standin, older)[0].holds, "format 1 pins the file's bytes"
    moved = evidence.local_links(standin, replace(lock, manifest_sha256="0" * 64))[0]
    assert says(moved.broken, f"the lock says {'0' * 64}") and says(moved.broken, f"manifest.yaml finds {standin.image_sha256}")


# -- cosign's verification, one key at a time ---------------------------------------------------------------------

def envelope(statement: dict) -> dict:
    return {"payload": base64.b64encode(json.dumps(statement).encode()).decode()}


def statement_of(digest: str, materials: list, config_digest: str) -> dict:
    """An SLSA v0.2 statement of `digest` that states `config_digest` and holds `materials`."""
    return {"subject": [{"digest": {"sha256": digest.split(":")[1]}}], "predicateType": SLSA_V02,
            "predicate": {"materials": materials, "invocation": {"parameters": {"configDigest": config_digest}}}}


class StandInCosign:
    """What cosign verifies per public key file name: the digests signed and the attestation envelopes, or a refusal."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, signed: dict[str, list[str] | str], attested: dict[str, list | str]) -> None:
        self.signed, self.attested, self.calls = signed, attested, []
        monkeypatch.setattr(cosign, "verify", self.verify)
        monkeypatch.setattr(cosign, "verify_attestation", self.verify_attestation)

    def verify(self, reference: str, key: Path) -> list[dict]:
        self.calls.append(("verify", reference, key.name))
        found = self.signed[key.name]
        if isinstance(found, str):
            raise SignatureError(found, "fix")
        return [{"critical": {"image": {"docker-manifest-digest": digest}}} for digest in found]

    def verify_attestation(self, reference: str, key: Path, predicate_type: str) -> list:
        self.calls.append(("verify-attestation", reference, key.name, predicate_type))
        found = self.attested[key.name]
        if isinstance(found, str):
            raise SignatureError(found, "fix")
        return found


def test_each_key_gives_a_signature_and_an_attestation_link_of_the_pushed_digest(standin, monkeypatch, tmp_path):
    lock = read_lock(standin)
    materials = provenance_predicate(lock, "manifest.yaml")["materials"]
    stand_in = StandInCosign(monkeypatch, {"alice.pub": [DIGEST], "bob.pub": [OTHER]},
                             {"alice.pub": [envelope(statement_of(DIGEST, materials, lock.derived.image_id))],
                              "bob.pub": [envelope(statement_of(DIGEST, materials[:1], lock.derived.image_id))]})
    reference = f"{REPOSITORY}@{DIGEST}"
    links = evidence.signature_links(reference, [tmp_path / "alice.pub", tmp_path / "bob.pub"], lock, standin)
    assert [(link.kind, link.name, link.holds) for link in links] == [
        ("signature", "alice.pub", True), ("attestation", "alice.pub", True), ("signature", "bob.pub", False), ("attestation", "bob.pub", False)]
    assert links[0].value == DIGEST and links[1].value == f"{DIGEST} ({len(materials)} materials)"
    assert stand_in.calls == [("verify", reference, "alice.pub"), ("verify-attestation", reference, "alice.pub", PREDICATE_TYPE),
                              ("verify", reference, "bob.pub"), ("verify-attestation", reference, "bob.pub", PREDICATE_TYPE)]


def test_cosign_s_refusals_are_broken_links_that_carry_its_reason(standin, monkeypatch, tmp_path):
    lock = read_lock(standin)
    StandInCosign(monkeypatch, {"alice.pub": "cosign could not verify (no signatures found)"},
                  {"alice.pub": "cosign could not verify the attestation (none matched)"})
    signature, attestation = evidence.signature_links(f"{REPOSITORY}@{DIGEST}", [tmp_path / "alice.pub"], lock, standin)
    assert (signature.kind, signature.value, signature.holds) == ("signature", DIGEST, False)
    assert signature.broken.endswith("alice.pub: no signatures found")
    assert (attestation.kind, attestation.value, attestation.holds) == ("attestation", DIGEST, False)
    assert attestation.broken.endswith("alice.pub: no attestation verifies (none matched)")


@pytest.mark.parametrize("printed, error", [({}, "KeyError"), ({"payload": "%%%%"}, "JSONDecodeError"), ({"payload": None}, "TypeError")])
def test_an_envelope_that_holds_no_statement_breaks_the_attestation_link_naming_why(standin, monkeypatch, tmp_path, printed, error):
    lock = read_lock(standin)
    StandInCosign(monkeypatch, {"alice.pub": [DIGEST]}, {"alice.pub": [printed]})
    signature, attestation = evidence.signature_links(f"{REPOSITORY}@{DIGEST}", [tmp_path / "alice.pub"], lock, standin)
    assert signature.holds and attestation.kind == "attestation" and not attestation.holds
    assert attestation.broken.endswith(f"({error})") and "in-toto" in attestation.broken


def test_trace_and_deploy_judge_the_statements_alike_whatever_their_order(standin, monkeypatch, tmp_path):
    """Two statements name the digest; one states another image's config digest. Deploy refuses the key in either
    order (every naming statement must agree), and so does trace: the verdict never depends on which comes first."""
    from kvbake.attest.adapters.admission import key_problem

    lock = read_lock(standin)
    materials = provenance_predicate(lock, "manifest.yaml")["materials"]
    good, forged = statement_of(DIGEST, materials, lock.derived.image_id), statement_of(DIGEST, materials, OTHER)
    reference = f"{REPOSITORY}@{DIGEST}"
    for order in ([good, forged], [forged, good]):
        StandInCosign(monkeypatch, {"alice.pub": [DIGEST]}, {"alice.pub": [envelope(s) for s in order]})
        problem = key_problem(reference, DIGEST, lock.derived.image_id, tmp_path / "alice.pub", materials)
        _, attestation = evidence.signature_links(reference, [tmp_path / "alice.pub"], lock, standin)
        assert problem == f"the attestation states config {OTHER}, the release is {lock.derived.image_id}"
        assert not attestation.holds and attestation.broken == f"the attestation by alice.pub: {problem}"
    StandInCosign(monkeypatch, {"alice.pub": [DIGEST]}, {"alice.pub": [envelope(good)]})
    assert key_problem(reference, DIGEST, lock.derived.image_id, tmp_path / "alice.pub", materials) is None
    assert evidence.signature_links(reference, [tmp_path / "alice.pub"], lock, standin)[1].holds


# -- every rank -----------------------------------------------------------------------------------------------------

class StandInChecks:
    """verify-running's findings per node; which ranks were checked against which release."""

    def __init__(self, findings: dict[str, tuple[str, ...]]) -> None:
        self.findings, self.calls = findings, []

    def __call__(self, name: str, release, switches: dict[str, str] | None = None) -> SimpleNamespace:
        self.calls.append((name, release.id, switches))
        return SimpleNamespace(failures=self.findings.get(name, ()))


def fleet_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, current: dict[str, object], findings: dict[str, tuple[str, ...]]):
    world = make_world(tmp_path, monkeypatch)
    for name, release in current.items():
        NodeState(name, world.engines[name]).update("base:1", "test: seeded", current=release)
    checks = StandInChecks(findings)
    return SimpleNamespace(deployment=world.fleet.deployment, engines=world.engines, check_rank=checks), checks


def test_every_rank_running_the_locked_image_holds(tmp_path, monkeypatch):
    lock = replace(read_lock(load_manifest(STANDIN / "manifest.yaml")), derived=Derived("sha256:" + "6" * 64, CONTROL.config_digest))
    fleet, checks = fleet_for(tmp_path, monkeypatch, {"a": CONTROL, "b": CONTROL}, {})
    links = evidence.fleet_links(fleet, lock)
    assert [(link.kind, link.name, link.value, link.holds) for link in links] == [
        ("rank", "a", CONTROL.config_digest, True), ("rank", "b", CONTROL.config_digest, True)]
    assert checks.calls == [("a", CONTROL.id, None), ("b", CONTROL.id, None)], "each rank held to its record's own switch set"


def test_a_rank_without_a_release_or_running_another_image_is_broken_and_the_next_is_still_checked(tmp_path, monkeypatch):
    lock = replace(read_lock(load_manifest(STANDIN / "manifest.yaml")), derived=Derived("sha256:" + "6" * 64, CONTROL.config_digest))
    fleet, checks = fleet_for(tmp_path, monkeypatch, {"b": PACKING}, {"b": ("b: switch S is 3, expected unset",)})
    a, b = evidence.fleet_links(fleet, lock)
    assert (a.name, a.holds, b.name, b.holds) == ("a", False, "b", False)
    assert says(a.broken, "no release recorded")
    assert b.broken.split("; ")[0] == "b: switch S is 3, expected unset"
    assert PACKING.config_digest in b.broken.split("; ")[1] and CONTROL.config_digest in b.broken.split("; ")[1]
    assert checks.calls == [("b", PACKING.id, None)]


def test_a_rank_whose_record_is_another_image_is_broken_even_when_it_runs_as_recorded(tmp_path, monkeypatch):
    lock = replace(read_lock(load_manifest(STANDIN / "manifest.yaml")), derived=Derived("sha256:" + "6" * 64, CONTROL.config_digest))
    fleet, _ = fleet_for(tmp_path, monkeypatch, {"a": PACKING, "b": CONTROL}, {})
    a, b = evidence.fleet_links(fleet, lock)
    assert not a.holds and b.holds
    assert says(a.broken, f"the node's record says {PACKING.config_digest}") and says(a.broken, f"the lock says {CONTROL.config_digest}")


def test_a_node_whose_records_are_all_corrupt_stops_the_trace_naming_that_node(tmp_path, monkeypatch):
    lock = read_lock(load_manifest(STANDIN / "manifest.yaml"))
    fleet, checks = fleet_for(tmp_path, monkeypatch, {"a": CONTROL, "b": CONTROL}, {})
    fleet.engines["b"].files["kvbake-state"]["/kvbake/state-a.json"] = b"not json"
    with pytest.raises(RolloutError) as caught:
        evidence.fleet_links(fleet, lock)
    assert says(caught.value.message, "node b") and checks.calls == [("a", CONTROL.id, None)]


def test_the_registry_links_follow_the_registry_the_push_record_names(standin, monkeypatch):
    """`push --registry HOST:PORT` pushed elsewhere than output.repository: trace reads the release back from there."""
    lock = read_lock(standin)
    tag = record_push(standin, f"127.0.0.1:7000/mirror/standin-kvpack@{DIGEST}")
    registry = StandInRegistry(monkeypatch, {("mirror/standin-kvpack", tag): served(DIGEST, lock.derived.image_id)})
    assert all(link.holds for link in evidence.registry_links(standin, lock))
    assert registry.opened == [("127.0.0.1:7000", "login for 127.0.0.1:7000")] and registry.asked == [("mirror/standin-kvpack", tag)]
