"""Signed releases on the rig's registry with the real cosign: `keys` makes a pair, `sign` signs the pushed digest and
attaches its SLSA provenance, and cosign itself verifies both, with that key only; the bad inputs are refused."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.errors import SignatureError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.attest.adapters import cosign
from kvbake.attest.core.admission import key_fingerprint
from kvbake.attest.core.slsa import PREDICATE_TYPE, provenance_predicate
from kvbake_rig import LocalRegistry
from kvbake.ship.adapters.nodestate import NodeState

from conftest import run
from shiprig import node_snapshot

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
    assert code == 19 and err.startswith("error (signature): the password does not open cosign.key") and len(err.strip().splitlines()) == 1, err
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
    built = engine.client.image.inspect(f"{repository}:{tag}").id
    engine.client.image.tag(tiny_base, f"{repository}:{tag}")
    engine.client.image.push(f"{repository}:{tag}", quiet=True)
    code, links, err = trace(capsys, manifest, "--key", str(tmp_path / "team" / "cosign.pub"))
    assert code == 7 and broken(links)[0] == ("manifest", "pushed manifest digest") and digest in err, err
    # the release tag back on the release, here and in the registry, for the tests after this one
    engine.client.image.tag(built, f"{repository}:{tag}")
    edits = RegistryEdits(rig["registry"].address, repository_name)
    released = edits.manifest(digest)
    assert edits.put_manifest(tag, released[0], released[1]) == digest


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


class RegistryEdits:
    """Direct edits of the rig's registry, as someone with push rights but no reviewer's key would make them."""

    ACCEPT = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"

    def __init__(self, address: str, name: str) -> None:
        self.origin = httpx.URL(f"http://{address}")
        self.client = httpx.Client(base_url=f"http://{address}/v2/{name}", trust_env=False, timeout=30)

    def manifest(self, reference: str) -> tuple[bytes, str, str] | None:
        reply = self.client.get(f"/manifests/{reference}", headers={"Accept": self.ACCEPT})
        if reply.status_code == 404:
            return None
        assert reply.status_code == 200, reply.status_code
        return reply.content, reply.headers["Content-Type"], reply.headers["Docker-Content-Digest"]

    def blob(self, digest: str) -> bytes:
        reply = self.client.get(f"/blobs/{digest}", follow_redirects=True)
        assert reply.status_code == 200, reply.status_code
        return reply.content

    def put_blob(self, data: bytes) -> str:
        digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
        started = self.client.post("/blobs/uploads/")
        assert started.status_code == 202, started.status_code
        upload = self.origin.join(started.headers["Location"])  # the registry answers with a path from its root
        done = self.client.put(upload.copy_merge_params({"digest": digest}), content=data,
                               headers={"Content-Type": "application/octet-stream"})
        assert done.status_code == 201, done.status_code
        return digest

    def put_manifest(self, reference: str, data: bytes, media_type: str) -> str:
        reply = self.client.put(f"/manifests/{reference}", content=data, headers={"Content-Type": media_type})
        assert reply.status_code == 201, (reply.status_code, reply.text)
        return reply.headers["Docker-Content-Digest"]

    def delete(self, reference: str) -> None:
        found = self.manifest(reference)
        assert found is not None, reference
        assert self.client.delete(f"/manifests/{found[2]}").status_code == 202

    def relabelled(self, digest: str, tag: str) -> str:
        """The release with one label changed, pushed under `tag`: same layers, another config, another digest."""
        data, media_type, _ = self.manifest(digest)
        document = json.loads(data)
        config = json.loads(self.blob(document["config"]["digest"]))
        config["config"]["Labels"]["org.opencontainers.image.description"] = "relabelled after the review"
        raw = json.dumps(config).encode()
        document["config"] |= {"digest": self.put_blob(raw), "size": len(raw)}
        return self.put_manifest(tag, json.dumps(document).encode(), media_type)

    def altered_attestation(self, digest: str) -> bytes:
        """The attestation's statement edited (a patch's digest) with its signature kept; returns the original manifest."""
        tag = f"{digest.replace(':', '-')}.att"
        data, media_type, _ = self.manifest(tag)
        document = json.loads(data)
        layer = document["layers"][-1]
        envelope = json.loads(self.blob(layer["digest"]))
        statement = json.loads(base64.b64decode(envelope["payload"]))
        statement["predicate"]["materials"][1]["digest"]["sha256"] = "0" * 64
        envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
        raw = json.dumps(envelope).encode()
        layer |= {"digest": self.put_blob(raw), "size": len(raw)}
        self.put_manifest(tag, json.dumps(document).encode(), media_type)
        return data


def refused(capsys, rig, repository: str, argv: list[str], *named: str) -> str:
    """The command exits 19 with one line naming each of `named`, and neither node changed."""
    before = {key: node_snapshot(rig[key], f"spark-{key}", repository) for key in ("a", "b")}
    code, _, err = run(capsys, *argv)
    assert code == 19 and len(err.strip().splitlines()) == 1 and all(text in err for text in named), err
    assert {key: node_snapshot(rig[key], f"spark-{key}", repository) for key in ("a", "b")} == before
    return err


def test_deploy_and_rollback_move_only_to_what_a_listed_key_signed_and_attested(capsys, monkeypatch, pushed, rig, tmp_path):
    from shiprig import STANDIN_LAUNCHER, reset_nodes, write_deploy

    manifest, reference = pushed
    repository, digest = reference.split("@")
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    for name in ("team", "stranger"):
        assert run(capsys, "keys", "--out", str(tmp_path), "--name", name)[0] == 0
    files = {}
    for name in ("team", "stranger"):
        (tmp_path / name).mkdir()
        files[name] = write_deploy(tmp_path / name, rig, STANDIN_LAUNCHER, signing={"require_signature": True, "keys": [f"../{name}.pub"]})
    files["none"] = write_deploy(tmp_path, rig, STANDIN_LAUNCHER, signing={"require_signature": True, "keys": []})
    reset_nodes(rig, repository)

    def ship(command: str, deploy_file: Path, *extra: str) -> list[str]:
        return [command, *extra, "--manifest", str(manifest), "--deploy", str(deploy_file)]

    control = ship("deploy", files["team"], "--preset", "control")
    refused(capsys, rig, repository, ship("deploy", files["none"], "--preset", "control"), "signing.keys lists no key")
    refused(capsys, rig, repository, control, "team.pub", digest)  # not signed by the team yet

    code, out, err = run(capsys, "push", "--sign", str(tmp_path / "team.key"), "--manifest", str(manifest), "--json")
    assert code == 0 and json.loads(out)["pinned"] == json.loads(out)["signed"]["image"] == reference, err
    refused(capsys, rig, repository, ship("deploy", files["stranger"], "--preset", "control"), "stranger.pub", digest)
    assert run(capsys, *control)[0] == 0
    assert run(capsys, *ship("deploy", files["team"], "--preset", "packing-327680"))[0] == 0
    fingerprint = key_fingerprint((tmp_path / "team.pub").read_text())
    for key in ("a", "b"):
        records = NodeState(f"spark-{key}", Engine(rig[key].host)).read()
        assert records.current.signed_by == {"key": "team.pub", "fingerprint": fingerprint} == records.previous.signed_by
        assert f"{reference} signed by team.pub ({fingerprint[:19]})" in records.audit
    assert run(capsys, *ship("rollback", files["team"]))[0] == 0  # to control: its signature is checked again
    audit = NodeState("spark-b", Engine(rig["b"].host)).read().audit.splitlines()
    begun = [line.split(" begins: ") for line in audit if " begins: " in line]
    assert begun[-1][0].split()[-2] == "rollback" and begun[-1][1] == f"{reference} signed by team.pub ({fingerprint[:19]})", begun[-1]

    edits = RegistryEdits(rig["registry"].address, repository.split("/", 1)[1])
    tag = next((manifest.parent / ".kvbake" / "pushes").glob("*.json")).stem
    relabelled = edits.relabelled(digest, tag)  # one label changed and re-pushed under the release tag
    other = ship("deploy", files["team"], "--preset", "control", "--image", f"{repository}@{relabelled}")
    refused(capsys, rig, repository, other, "team.pub", relabelled)
    code, links, err = trace(capsys, manifest, "--key", str(tmp_path / "team.pub"))
    assert code == 7 and broken(links)[0] == ("manifest", "pushed manifest digest") and relabelled in err, err
    released = edits.manifest(digest)
    assert edits.put_manifest(tag, released[0], released[1]) == digest  # the release tag back on the reviewed image
    signature = edits.manifest(f"{digest.replace(':', '-')}.sig")
    edits.put_manifest(f"{relabelled.replace(':', '-')}.sig", signature[0], signature[1])  # a signature for another digest
    assert subprocess.run([cosign.cosign_binary(), "verify", "--key", str(tmp_path / "team.pub"), "--insecure-ignore-tlog",
                           "--allow-http-registry", f"{repository}@{relabelled}"], capture_output=True).returncode != 0
    refused(capsys, rig, repository, other, "team.pub", relabelled)

    kept = edits.altered_attestation(digest)
    refused(capsys, rig, repository, control, "team.pub", "no attestation verifies")
    code, links, err = trace(capsys, manifest, "--key", str(tmp_path / "team.pub"))
    assert code == 19 and ("attestation", "team.pub") in broken(links) and ("signature", "team.pub") not in broken(links), err
    edits.put_manifest(f"{digest.replace(':', '-')}.att", kept, json.loads(kept)["mediaType"])
    predicate = provenance_predicate(read_lock(load_manifest(manifest)), "manifest.yaml")
    predicate["materials"][0]["digest"]["sha256"] = "1" * 64  # signed with the team's key, but not from this lock
    cosign.attest(reference, tmp_path / "team.key", PASSWORD, predicate, PREDICATE_TYPE)
    assert len(cosign.verify_attestation(reference, tmp_path / "team.pub", PREDICATE_TYPE)) == 2, "cosign accepts both statements"
    refused(capsys, rig, repository, control, "team.pub", "materials are not the lock's")

    edits.delete(f"{digest.replace(':', '-')}.sig")
    refused(capsys, rig, repository, ship("rollback", files["team"]), "team.pub", digest, "no signature verifies")


def test_sign_refuses_a_missing_key_a_foreign_key_and_a_read_only_registry(capsys, monkeypatch, pushed, rig, tmp_path):
    manifest, reference = pushed
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    code, _, err = run(capsys, "sign", "--key", str(tmp_path / "absent.key"), "--manifest", str(manifest))
    assert code == 19 and "signing key" in err and "absent.key not found" in err, err
    foreign = tmp_path / "ssh.key"
    foreign.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n")
    code, _, err = run(capsys, "sign", "--key", str(foreign), "--manifest", str(manifest))
    assert code == 19 and "ssh.key is not a cosign private key" in err, err
    assert run(capsys, "keys", "--out", str(tmp_path), "--name", "team")[0] == 0
    monkeypatch.setenv("COSIGN_PASSWORD", "not the password")
    code, _, err = run(capsys, "sign", "--key", str(tmp_path / "team.key"), "--manifest", str(manifest))
    assert code == 19 and "the password does not open team.key" in err and "not the password" not in err, err

    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    registry = rig["registry"]
    name = reference.split("@")[0].split("/", 1)[1]
    tags = [f"{reference.split('@')[1].replace(':', '-')}.{kind}" for kind in ("sig", "att")]
    edits = RegistryEdits(registry.address, name)
    before = {tag: edits.manifest(tag) for tag in tags}
    wrapper = tmp_path / "cosign-via-read-only"
    wrapper.write_text(REDIRECTING_COSIGN.format(python=sys.executable, cosign=cosign.cosign_binary()))
    wrapper.chmod(0o755)
    with LocalRegistry(tmp_path / "read-only", storage=registry.root / "storage", read_only=True) as read_only:
        monkeypatch.setenv("KVBAKE_COSIGN", str(wrapper))
        monkeypatch.setenv("REDIRECT_FROM", registry.address)
        monkeypatch.setenv("REDIRECT_TO", read_only.address)
        for refused_upload in ("sign", "attest"):  # the registry refuses the signature, or takes it and refuses the attestation
            monkeypatch.setenv("REDIRECT_COMMAND", refused_upload)
            code, _, err = run(capsys, "sign", "--key", str(tmp_path / "team.key"), "--manifest", str(manifest))
            assert code == 19 and f"cosign could not {refused_upload}" in err and len(err.strip().splitlines()) == 1, err
            assert "the signature and attestation tags are as they were" in err, err
            assert {tag: edits.manifest(tag) for tag in tags} == before, refused_upload


# A real cosign whose one command (REDIRECT_COMMAND) goes to another registry address (a read-only registry serving the
# same storage): that upload is refused by a real registry, the others reach the rig's as usual.
REDIRECTING_COSIGN = """#!{python}
import os, sys
argv = sys.argv[1:]
if argv and argv[0] == os.environ["REDIRECT_COMMAND"]:
    argv[-1] = argv[-1].replace(os.environ["REDIRECT_FROM"], os.environ["REDIRECT_TO"], 1)
os.execv("{cosign}", ["{cosign}", *argv])
"""


@pytest.mark.once_on_containerd  # cosign and TLS, not the store: once per run
def test_push_sign_doctor_and_cosign_reach_a_registry_whose_ca_only_the_engines_trust(capsys, monkeypatch, engine, tmp_path):
    """A private CA the engines read from /etc/docker/certs.d: cosign does not read it by itself (before kvbake handed it
    over, `push` passed and `sign` failed with `x509: certificate signed by unknown authority`)."""
    from kvbake.cli import main

    folder = tmp_path / "standin"
    shutil.copytree(STANDIN, folder, ignore=shutil.ignore_patterns(".kvbake"))
    manifest = folder / "manifest.yaml"
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    assert run(capsys, "keys", "--out", str(tmp_path / "team"))[0] == 0
    with LocalRegistry(tmp_path / "tls-registry", tls=True) as secured:
        assert secured.address.startswith("127.0.0.1:") and secured.url.startswith("https://")
        manifest.write_text(manifest.read_text().replace("127.0.0.1:5000/kvbake/standin-kvpack", f"{secured.address}/kvbake/tls-standin"))
        for argv in (["lock", "--rebase-base"], ["build"]):
            assert main([*argv, "--manifest", str(manifest)]) == 0, argv
        code, out, err = run(capsys, "push", "--sign", str(tmp_path / "team" / "cosign.key"), "--manifest", str(manifest))
        assert code == 0, err
        reference = json.loads(next((folder / ".kvbake" / "pushes").glob("*.json")).read_text())["pinned"]
        assert [s["critical"]["image"]["docker-manifest-digest"] for s in cosign.verify(reference, tmp_path / "team" / "cosign.pub")] == [
            reference.split("@")[1]]
        with pytest.raises(subprocess.CalledProcessError):  # the fault: cosign alone does not trust the engines' CA
            subprocess.run([cosign.cosign_binary(), "verify", "--key", str(tmp_path / "team" / "cosign.pub"), "--insecure-ignore-tlog",
                            reference], check=True, capture_output=True, timeout=120)
        deploy = folder / "deploy.yaml"  # a deployment that requires signatures: doctor checks cosign's reach
        deploy.write_text(json.dumps({"format": 1, "nodes": [{"name": "a", "host": os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock",
                                                             "role": "head"}],
                                      "launcher": {"command": ["true"], "container": "serve", "timeout_s": 10},
                                      "signing": {"require_signature": True, "keys": [str(tmp_path / "team" / "cosign.pub")]}}))
        code, out, err = run(capsys, "doctor", "--manifest", str(manifest), "--deploy", str(deploy))
        line = next(line for line in out.splitlines() if line.split()[1:2] == ["cosign"])
        assert line.startswith("ok") and f"cosign reaches {secured.address} with the engines' CA" in line, out + err
