"""Signed releases on the rig's registry with the real cosign: `keys` makes a pair, `sign` signs the pushed digest and
attaches its SLSA provenance, and cosign itself verifies both, with that key only; the bad inputs are refused."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from kvbake.errors import SignatureError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.provenance.adapters import cosign
from kvbake.provenance.core.slsa import PREDICATE_TYPE, provenance_predicate

from conftest import run

pytestmark = [pytest.mark.docker, pytest.mark.field_engines_only]  # signing needs a registry and cosign; proven on the engines operators run
STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def pushed(rig, tmp_path_factory) -> tuple[Path, str]:
    """A copy of the stand-in in a repository of its own on the rig's registry: locked, built and pushed."""
    from kvbake.cli import main

    folder = tmp_path_factory.mktemp("signed") / "standin"
    shutil.copytree(STANDIN, folder, ignore=shutil.ignore_patterns(".kvbake"))
    manifest = folder / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("127.0.0.1:5000/kvbake/standin-kvpack", f"{rig['registry'].address}/kvbake/signed-standin"))
    for argv in (["lock", "--rebase-base"], ["build"], ["push"]):
        assert main([*argv, "--manifest", str(manifest)]) == 0, argv
    pinned = json.loads(next((folder / ".kvbake" / "pushes").glob("*.json")).read_text())["pinned"]
    return manifest, pinned


def statements(envelopes: list[dict]) -> list[dict]:
    return [json.loads(base64.b64decode(envelope["payload"])) for envelope in envelopes]


def test_a_signed_release_and_its_provenance_verify_with_its_key_only(capsys, monkeypatch, pushed, tmp_path):
    manifest, reference = pushed
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    code, out, err = run(capsys, "keys", "--out", str(tmp_path / "team"), "--json")
    assert code == 0, err
    keys = json.loads(out)
    key, pub = Path(keys["private_key"]), Path(keys["public_key"])
    assert key.is_file() and pub.read_text().startswith("-----BEGIN PUBLIC KEY-----") and PASSWORD not in key.read_text()
    code, out, err = run(capsys, "sign", "--key", str(key), "--manifest", str(manifest), "--json")
    assert code == 0, err
    assert json.loads(out)["image"] == reference and PASSWORD not in out + err

    signed = cosign.verify(reference, pub)
    assert [s["critical"]["image"]["docker-manifest-digest"] for s in signed] == [reference.split("@")[1]]
    (statement,) = statements(cosign.verify_attestation(reference, pub, PREDICATE_TYPE))
    assert statement["predicateType"] == "https://slsa.dev/provenance/v0.2"
    assert statement["subject"][0]["digest"] == {"sha256": reference.split("@sha256:")[1]}
    lock = read_lock(load_manifest(manifest))
    assert statement["predicate"] == provenance_predicate(lock, "manifest.yaml"), "cosign keeps every field kvbake wrote"
    assert [m["digest"]["sha256"] for m in statement["predicate"]["materials"][1:-1]] == [p.sha256 for p in lock.patches]

    monkeypatch.setenv("COSIGN_PASSWORD", "another")
    assert run(capsys, "keys", "--out", str(tmp_path / "other"))[0] == 0
    with pytest.raises(SignatureError) as caught:
        cosign.verify(reference, tmp_path / "other" / "cosign.pub")
    assert caught.value.exit_code == 19


def test_keys_and_sign_refuse_what_they_cannot_do_safely(capsys, monkeypatch, pushed, tmp_path):
    manifest, _ = pushed
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    assert run(capsys, "keys", "--out", str(tmp_path))[0] == 0
    before = (tmp_path / "cosign.key").read_bytes()
    code, _, err = run(capsys, "keys", "--out", str(tmp_path))
    assert code == 19 and "already exists; keys are never overwritten" in err and (tmp_path / "cosign.key").read_bytes() == before
    monkeypatch.setenv("COSIGN_PASSWORD", "wrong")
    code, _, err = run(capsys, "sign", "--key", str(tmp_path / "cosign.key"), "--manifest", str(manifest))
    assert code == 19 and err.startswith("error (signature): cosign could not sign") and len(err.strip().splitlines()) == 1, err
    monkeypatch.delenv("COSIGN_PASSWORD")
    code, _, err = run(capsys, "sign", "--key", str(tmp_path / "cosign.key"), "--manifest", str(manifest))
    assert code == 19 and "set COSIGN_PASSWORD" in err
    monkeypatch.setenv("KVBAKE_COSIGN", str(tmp_path / "no-cosign"))
    code, _, err = run(capsys, "keys", "--out", str(tmp_path / "x"))
    assert code == 19 and "cosign is not installed at" in err


COSIGN_3 = cosign.CACHED.parents[3].with_name("cosign-3") / "root" / "usr" / "bin" / "cosign"  # scripts/install_tools.sh


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch) -> None:
    """cosign reaches the rig's registry only: anything else it would fetch (cosign 3 looks for a trust root) goes to a
    closed loopback port, never to a name server or another address."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def test_what_either_cosign_generation_signs_the_other_verifies(capsys, monkeypatch, pushed, tmp_path):
    manifest, reference = pushed
    digest = reference.split("@")[1]
    assert COSIGN_3.is_file() and cosign.CACHED.is_file(), "scripts/install_tools.sh unpacks both"
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    assert run(capsys, "keys", "--out", str(tmp_path))[0] == 0
    for signer in (cosign.CACHED, COSIGN_3):
        monkeypatch.setenv("KVBAKE_COSIGN", str(signer))
        code, _, err = run(capsys, "sign", "--key", str(tmp_path / "cosign.key"), "--manifest", str(manifest))
        assert code == 0, (signer, err)
        for verifier in (cosign.CACHED, COSIGN_3):
            monkeypatch.setenv("KVBAKE_COSIGN", str(verifier))
            signed = {s["critical"]["image"]["docker-manifest-digest"] for s in cosign.verify(reference, tmp_path / "cosign.pub")}
            subjects = {s["subject"][0]["digest"]["sha256"] for s in statements(cosign.verify_attestation(reference, tmp_path / "cosign.pub", PREDICATE_TYPE))}
            assert (signed, subjects) == ({digest}, {digest.split(":")[1]}), (signer, verifier)
    code, links, err = trace(capsys, manifest, "--key", str(tmp_path / "cosign.pub"))
    assert (code, [link["kind"] for link in links if not link["holds"]]) == (0, []), err


def trace(capsys, manifest: Path, *extra: str) -> tuple[int, list[dict], str]:
    code, out, err = run(capsys, "trace", "--manifest", str(manifest), "--json", *extra)
    return code, json.loads(out)["links"], err


def broken(links: list[dict]) -> list[tuple[str, str]]:
    return [(link["kind"], link["name"]) for link in links if not link["holds"]]


def test_trace_proves_each_link_and_names_the_first_broken_one_with_both_values(capsys, monkeypatch, pushed, rig, tmp_path, engine,
                                                                                       tiny_base):
    manifest, reference = pushed
    digest = reference.split("@")[1]
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    assert run(capsys, "keys", "--out", str(tmp_path / "team"))[0] == 0
    assert run(capsys, "keys", "--out", str(tmp_path / "stranger"))[0] == 0
    assert run(capsys, "sign", "--key", str(tmp_path / "team" / "cosign.key"), "--manifest", str(manifest))[0] == 0

    code, links, err = trace(capsys, manifest, "--key", str(tmp_path / "team" / "cosign.pub"))
    assert (code, broken(links)) == (0, []), err
    kinds = [link["kind"] for link in links]
    assert kinds.count("patch") == 7 and kinds.count("file") == 9 and kinds[-2:] == ["signature", "attestation"]
    assert {link["value"] for link in links if link["kind"] == "manifest"} >= {digest}

    code, links, err = trace(capsys, manifest, "--key", str(tmp_path / "stranger" / "cosign.pub"))
    assert code == 19 and broken(links) == [("signature", "cosign.pub"), ("attestation", "cosign.pub")], err

    overlay = manifest.parent / "overlay" / "vllm" / "envs.py"
    kept = overlay.read_bytes()
    overlay.write_bytes(kept + b"# edited after the lock\n")
    try:
        code, links, err = trace(capsys, manifest)
        assert code == 7 and broken(links)[0] == ("file", "vllm/envs.py"), err
        assert read_lock(load_manifest(manifest)).file("vllm/envs.py").overlay_sha256 in err
    finally:
        overlay.write_bytes(kept)

    # the signature deleted from the registry: cosign finds none, and trace names the signature link (exit 19)
    repository_name = reference.split("@")[0].split("/", 1)[1]
    signature_tag = f"{digest.replace(':', '-')}.sig"
    with httpx.Client(base_url=f"http://{rig['registry'].address}", trust_env=False, timeout=10) as client:
        head = client.head(f"/v2/{repository_name}/manifests/{signature_tag}",
                           headers={"Accept": "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"})
        assert head.status_code == 200, head.status_code
        assert client.delete(f"/v2/{repository_name}/manifests/{head.headers['Docker-Content-Digest']}").status_code == 202
    code, links, err = trace(capsys, manifest, "--key", str(tmp_path / "team" / "cosign.pub"))
    assert code == 19 and broken(links)[0] == ("signature", "cosign.pub"), err

    # another image pushed under the release tag: the registry's manifest is no longer the one push recorded
    repository = reference.split("@")[0]
    tag = next((manifest.parent / ".kvbake" / "pushes").glob("*.json")).stem
    engine.client.image.tag(tiny_base, f"{repository}:{tag}")
    engine.client.image.push(f"{repository}:{tag}", quiet=True)
    code, links, err = trace(capsys, manifest, "--key", str(tmp_path / "team" / "cosign.pub"))
    assert code == 7 and broken(links)[0] == ("manifest", "pushed manifest digest") and digest in err, err


def skopeo_copy(reference: str, layout: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["skopeo", "copy", "--src-tls-verify=false", "--preserve-digests", f"docker://{reference}", f"oci:{layout}:release"],
                          capture_output=True, text=True, check=False)


def test_skopeo_copies_the_pushed_release_checking_every_digest_and_refuses_a_damaged_blob(pushed, rig, tmp_path):
    """An independent reader of the registry: the distribution's skopeo copies the release into an OCI layout,
    checking each blob against its digest, and keeps the manifest digest kvbake pushed and signed."""
    manifest, reference = pushed
    digest = reference.split("@")[1]
    done = skopeo_copy(reference, tmp_path / "layout")
    assert done.returncode == 0, done.stderr
    index = json.loads((tmp_path / "layout" / "index.json").read_text())
    assert [entry["digest"] for entry in index["manifests"]] == [digest]

    config = read_lock(load_manifest(manifest)).derived.image_id.split(":")[1]
    blob = rig["registry"].root / "storage" / "docker" / "registry" / "v2" / "blobs" / "sha256" / config[:2] / config / "data"
    kept = blob.read_bytes()
    blob.write_bytes(kept.replace(b'"', b"'", 1))
    try:
        damaged = skopeo_copy(reference, tmp_path / "damaged")
        assert damaged.returncode != 0 and config in damaged.stderr, damaged.stderr
    finally:
        blob.write_bytes(kept)
