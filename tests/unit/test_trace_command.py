"""`trace` over the stand-in example: the links it prints and returns, and the exit code its first broken link gives."""

from __future__ import annotations

import base64
import json
import shutil
from argparse import Namespace
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbake.bake.core.plan import tag_for
from kvbake.errors import IntegrityError, KvbakeError, SignatureError
from kvbake.lock import load_lock_file
from kvbake.manifest import Manifest, load_manifest
from kvbake.provenance import commands
from kvbake.attest.adapters import cosign
from kvbake.attest.core.admission import SLSA_V02
from kvbake.attest.core.slsa import provenance_predicate
from kvbake.registry.adapters import credentials, registry_api
from kvbake.ship.adapters import fleet as fleet_module
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.push_record import PUSHES_DIR
from kvbake.registry.core.remote_manifest import RemoteManifest

from fake_fleet import CONTROL, make_world
from message_words import says

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
REPOSITORY = "127.0.0.1:5000/kvbake/standin-kvpack"
DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "ef" * 32
LOCAL = ["donor", "donor", *["patch"] * 7, *["file"] * 9, "layer", "config"]


@pytest.fixture()
def standin(tmp_path: Path) -> Manifest:
    root = tmp_path / "standin"
    shutil.copytree(STANDIN, root, ignore=shutil.ignore_patterns(".kvbake"))
    manifest = load_manifest(root / "manifest.yaml")
    (root / PUSHES_DIR).mkdir(parents=True)
    (root / PUSHES_DIR / f"{tag_for(manifest, load_lock_file(manifest.lock_path))}.json").write_text(json.dumps({"pinned": f"{REPOSITORY}@{DIGEST}"}))
    return manifest


def serve(monkeypatch: pytest.MonkeyPatch, digest: str | None, config: str | None = None) -> None:
    """The registry serves every tag as a manifest with `digest` naming `config` (nothing when digest is None)."""
    class Client:
        def __init__(self, registry, auth) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            pass

        def manifest(self, name: str, tag: str) -> RemoteManifest | None:
            return None if digest is None else RemoteManifest(digest, "application/vnd.oci.image.manifest.v1+json", {"config": {"digest": config}})
    monkeypatch.setattr(registry_api, "RegistryClient", Client)
    monkeypatch.setattr(credentials, "credentials_for", lambda registry: None)


def cosign_answers(monkeypatch: pytest.MonkeyPatch, signed: list[str] | str, statements: list[dict] | str) -> list[str]:
    """cosign verifies `signed` digests and attests `statements` with any key (a text: its refusal); the references asked."""
    asked = []

    def verify(reference: str, key: Path) -> list[dict]:
        asked.append(reference)
        if isinstance(signed, str):
            raise SignatureError(signed, "fix")
        return [{"critical": {"image": {"docker-manifest-digest": d}}} for d in signed]

    def verify_attestation(reference: str, key: Path, predicate_type: str) -> list[dict]:
        if isinstance(statements, str):
            raise SignatureError(statements, "fix")
        return [{"payload": base64.b64encode(json.dumps(s).encode()).decode()} for s in statements]
    monkeypatch.setattr(cosign, "verify", verify)
    monkeypatch.setattr(cosign, "verify_attestation", verify_attestation)
    return asked


def statement(manifest: Manifest) -> dict:
    lock = load_lock_file(manifest.lock_path)
    return {"subject": [{"digest": {"sha256": DIGEST.split(":")[1]}}], "predicateType": SLSA_V02,
            "predicate": provenance_predicate(lock, "manifest.yaml")}


def args(manifest: Manifest, keys: tuple[Path, ...] = (), deploy: Path | None = None, as_json: bool = False) -> Namespace:
    return Namespace(manifest=manifest.path, key=list(keys), deploy=deploy, json=as_json)


def refused(call, kind: type[KvbakeError]) -> KvbakeError:
    with pytest.raises(KvbakeError) as caught:
        call()
    assert type(caught.value) is kind
    return caught.value


def test_a_chain_whose_every_link_holds_returns_them_all_and_ok(standin, monkeypatch):
    lock = load_lock_file(standin.lock_path)
    serve(monkeypatch, DIGEST, lock.derived.image_id)
    data, text = commands.cmd_trace(args(standin))
    assert data["ok"] is True and [link["kind"] for link in data["links"]] == [*LOCAL, "manifest", "manifest"]
    assert all(link["holds"] for link in data["links"]) and data["links"][-2]["value"] == DIGEST
    lines = text.splitlines()
    assert len(lines) == len(LOCAL) + 3 and lines[-1].endswith(f"({len(LOCAL) + 2})") and all(line.endswith("ok") for line in lines[:-1])


def test_a_changed_overlay_file_is_an_integrity_error_naming_the_first_broken_link_and_printing_every_link(standin, monkeypatch, capsys):
    lock = load_lock_file(standin.lock_path)
    serve(monkeypatch, DIGEST, lock.derived.image_id)
    path = standin.root / "overlay" / "vllm" / "envs.py"
    path.write_bytes(path.read_bytes() + b"# edited\n")
    error = refused(lambda: commands.cmd_trace(args(standin, as_json=True)), IntegrityError)
    assert error.exit_code == 7 and says(error.fix, "rebuild")
    assert says(error.message, "3 broken") and says(error.message, "file vllm/envs.py")
    [broken] = [f for f in lock.files if f.path == "vllm/envs.py"]
    assert broken.overlay_sha256 in error.message
    printed = json.loads(capsys.readouterr().out)
    assert printed["ok"] is False and [link["holds"] for link in printed["links"]].count(False) == 3
    assert len(printed["links"]) == len(LOCAL) + 2


def test_a_failed_trace_prints_the_table_without_json(standin, monkeypatch, capsys):
    serve(monkeypatch, None)
    error = refused(lambda: commands.cmd_trace(args(standin)), IntegrityError)
    assert says(error.message, "2 broken") and says(error.message, "manifest pushed manifest digest")
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(LOCAL) + 2 and "BROKEN" in out[-1] and "BROKEN" in out[-2] and out[0].endswith("ok")


def test_each_key_checks_the_signature_and_attestation_of_the_digest_the_registry_serves(standin, monkeypatch, tmp_path):
    lock = load_lock_file(standin.lock_path)
    serve(monkeypatch, DIGEST, lock.derived.image_id)
    asked = cosign_answers(monkeypatch, [DIGEST], [statement(standin)])
    data, _ = commands.cmd_trace(args(standin, (tmp_path / "alice.pub", tmp_path / "bob.pub")))
    assert [(link["kind"], link["name"]) for link in data["links"][len(LOCAL) + 2:]] == [
        ("signature", "alice.pub"), ("attestation", "alice.pub"), ("signature", "bob.pub"), ("attestation", "bob.pub")]
    assert [link["kind"] for link in data["links"][:len(LOCAL) + 2]] == [*LOCAL, "manifest", "manifest"]
    assert data["ok"] is True and asked == [f"{REPOSITORY}@{DIGEST}"] * 2


def test_a_signature_cosign_refuses_is_a_signature_error(standin, monkeypatch, tmp_path):
    lock = load_lock_file(standin.lock_path)
    serve(monkeypatch, DIGEST, lock.derived.image_id)
    cosign_answers(monkeypatch, "no signatures found", [statement(standin)])
    error = refused(lambda: commands.cmd_trace(args(standin, (tmp_path / "alice.pub",))), SignatureError)
    assert error.exit_code == 19 and says(error.fix, "sign") and says(error.message, "1 broken") and says(error.message, "signature alice.pub")
    assert says(error.message, "no signatures found")


def test_an_attestation_without_the_lock_s_materials_is_a_signature_error(standin, monkeypatch, tmp_path):
    lock = load_lock_file(standin.lock_path)
    serve(monkeypatch, DIGEST, lock.derived.image_id)
    cosign_answers(monkeypatch, [DIGEST], [{**statement(standin), "predicate": {**statement(standin)["predicate"], "materials": []}}])
    error = refused(lambda: commands.cmd_trace(args(standin, (tmp_path / "alice.pub",))), SignatureError)
    assert says(error.message, "attestation alice.pub")


def test_signatures_are_not_checked_when_the_registry_serves_no_pushed_manifest(standin, monkeypatch, tmp_path):
    serve(monkeypatch, None)
    asked = cosign_answers(monkeypatch, [DIGEST], [statement(standin)])
    error = refused(lambda: commands.cmd_trace(args(standin, (tmp_path / "alice.pub",), as_json=True)), IntegrityError)
    assert asked == [] and says(error.message, "manifest pushed manifest digest")



def test_signatures_are_not_checked_when_only_the_config_link_of_the_registry_holds(standin, monkeypatch, tmp_path):
    lock = load_lock_file(standin.lock_path)
    serve(monkeypatch, OTHER, lock.derived.image_id)  # another manifest under the tag, naming the locked config
    asked = cosign_answers(monkeypatch, [OTHER], [statement(standin)])
    error = refused(lambda: commands.cmd_trace(args(standin, (tmp_path / "alice.pub",), as_json=True)), IntegrityError)
    assert asked == [] and says(error.message, "manifest pushed manifest digest")

def deploy_file(folder: Path) -> Path:
    path = folder / "deploy.yaml"
    path.write_text(json.dumps({"format": 1, "nodes": [{"name": "a", "host": "unix:///a", "role": "head"}, {"name": "b", "host": "unix:///b", "role": "worker"}],
                                "launcher": {"command": ["launch"], "container": "serve"}}))
    return path


def fleet_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, current: dict[str, object]) -> list[tuple]:
    """The deployment's nodes are the fake world's, each recording `current`; every rank runs as recorded."""
    world = make_world(tmp_path / "world", monkeypatch)
    for name, release in current.items():
        NodeState(name, world.engines[name]).update("base:1", "test: seeded", current=release)
    made = []

    def make_fleet(deployment, manifest, lock):
        made.append((deployment.path, manifest.path, lock))
        return SimpleNamespace(deployment=deployment, engines=world.engines, check_rank=lambda name, release, switches=None: SimpleNamespace(failures=()))
    monkeypatch.setattr(fleet_module, "make_fleet", make_fleet)
    return made


def test_with_a_deployment_every_rank_is_a_link_and_one_on_another_release_is_an_integrity_error(standin, monkeypatch, tmp_path):
    lock = load_lock_file(standin.lock_path)
    serve(monkeypatch, DIGEST, lock.derived.image_id)
    (tmp_path / "ops").mkdir()
    deploy = deploy_file(tmp_path / "ops")
    made = fleet_running(tmp_path, monkeypatch, {"a": replace(CONTROL, config_digest=lock.derived.image_id), "b": CONTROL})
    error = refused(lambda: commands.cmd_trace(args(standin, deploy=deploy, as_json=True)), IntegrityError)
    assert says(error.message, "rank b") and says(error.message, "1 broken") and CONTROL.config_digest in error.message
    assert made == [(deploy.absolute(), standin.path, lock)]


def test_with_a_deployment_whose_ranks_all_run_the_lock_s_image_every_link_holds(standin, monkeypatch, tmp_path):
    lock = load_lock_file(standin.lock_path)
    serve(monkeypatch, DIGEST, lock.derived.image_id)
    (tmp_path / "ops").mkdir()
    running = replace(CONTROL, config_digest=lock.derived.image_id)
    fleet_running(tmp_path, monkeypatch, {"a": running, "b": running})
    data, _ = commands.cmd_trace(args(standin, deploy=deploy_file(tmp_path / "ops")))
    assert data["ok"] is True and [link["kind"] for link in data["links"]] == [*LOCAL, "manifest", "manifest", "rank", "rank"]
    assert [link["name"] for link in data["links"][-2:]] == ["a", "b"]
