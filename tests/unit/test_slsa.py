"""The SLSA provenance predicate of the stand-in's lock, and the cosign options kvbake passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake import __version__
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.attest.adapters.cosign import registry_options
from kvbake.attest.core.slsa import hex_of, provenance_predicate

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin" / "manifest.yaml"


def test_the_materials_are_the_base_each_patch_and_the_donor_commit_by_digest():
    lock = read_lock(load_manifest(STANDIN))
    predicate = provenance_predicate(lock, "manifest.yaml")
    base, *patches, donor = predicate["materials"]
    assert base == {"uri": f"docker-image://{lock.base.reference}", "digest": {"sha256": lock.base.config_digest.split(":")[1]}}
    assert patches == [{"uri": f"patch:{p.file}", "digest": {"sha256": p.sha256, "gitPatchId": p.patch_id}} for p in lock.patches]
    assert len(patches) == 7 and donor == {"uri": lock.donor_url, "digest": {"sha1": lock.donor_revision}}
    assert predicate["builder"] == {"id": f"kvbake/{__version__}"}
    assert predicate["invocation"]["configSource"] == {"uri": lock.donor_url, "digest": {"sha1": lock.donor_revision},
                                                       "entryPoint": "manifest.yaml"}
    parameters = predicate["invocation"]["parameters"]
    assert (parameters["configDigest"], parameters["layerDiffId"], parameters["chain"]) == (
        lock.derived.image_id, lock.derived.layer_diff_id, [p.id for p in lock.patches])


def test_a_digest_that_is_not_sha256_is_refused():
    assert hex_of("sha256:" + "a" * 64) == "a" * 64
    for bad in ("sha512:" + "a" * 128, "sha256:abc", "a" * 64):
        with pytest.raises(ValueError):
            hex_of(bad)


@pytest.mark.parametrize(("reference", "options"), [("127.0.0.1:5000/x@sha256:a", ["--allow-http-registry"]),
                                                    ("localhost:5000/x@sha256:a", ["--allow-http-registry"]),
                                                    ("registry.lan:5000/x@sha256:a", []), ("127x.example/x@sha256:a", []),
                                                    ("localhost.registry.corp.example:5000/x@sha256:a", []),
                                                    ("127.0.0.1.nip.example:5000/x@sha256:a", []), ("[::1]:5000/x@sha256:a", ["--allow-http-registry"])])
def test_plain_http_is_allowed_for_a_loopback_registry_only(reference, options):
    assert registry_options(reference) == options


def test_the_build_type_the_parameters_and_the_completeness_claims_are_stated():
    lock = read_lock(load_manifest(STANDIN))
    predicate = provenance_predicate(lock, "manifest.yaml")
    assert predicate["buildType"] == "kvbake/bake@v1"
    assert predicate["metadata"] == {"reproducible": True, "completeness": {"parameters": True, "environment": True, "materials": True}}
    assert predicate["invocation"]["parameters"] == {
        "sourceRoot": lock.source_root, "sourceDateEpoch": lock.source_date_epoch, "chain": [p.id for p in lock.patches],
        "baseRegistryDigest": lock.base.repo_digest, "layerDiffId": lock.derived.layer_diff_id, "configDigest": lock.derived.image_id,
        "manifestSha256": lock.manifest_sha256}
    assert set(predicate) == {"builder", "buildType", "invocation", "metadata", "materials"}
