"""Signed releases on the rig's registry with the real cosign: `keys` makes a pair, `sign` signs the pushed digest and
attaches its SLSA provenance, and cosign itself verifies both, with that key only; the bad inputs are refused."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

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
