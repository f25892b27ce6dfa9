"""`push` end to end on a built tiny project: the local image verified, pushed once into an in-memory registry, read back
by digest, recorded beside the manifest; a second push uploads nothing; an image that fails verification is never
pushed."""

from __future__ import annotations

import base64
import functools
import json
from pathlib import Path

import httpx
import pytest

from kvbake import cli
from kvbake.bake.adapters.builder import build_image
from kvbake.bake.adapters.pinning import create_lock
from kvbake.digests import sha256_digest
from kvbake.errors import IntegrityError
from kvbake.ship import commands
from kvbake.ship.adapters import pusher
from kvbake.registry.adapters.registry_api import DOCKER_MANIFEST, RegistryClient
from kvbake.ship.core.push_record import PUSHES_DIR
from test_pushing import MemoryRegistry
from tests.unit.bake_engine import BakeEngine
from tests.unit.bake_project import engine_with_base, project

LOGIN = "pusher:s3cret"
REGISTRY = "127.0.0.1:41234"  # not the manifest's own registry host: the push adds, then removes, a local tag


class PushingEngine(BakeEngine):
    """The tiny project's engine; an image's RepoTags follow its tags, and its push puts the image (config and layers as
    stored) into the in-memory registry and records the RepoDigest, as the engine does."""

    registry: MemoryRegistry
    folder: Path

    def config_dir(self) -> str:
        return str(self.folder)

    def tag(self, image_id: str, reference: str) -> None:
        super().tag(image_id, reference)
        self.images[image_id]["RepoTags"] = sorted({*self.images[image_id]["RepoTags"], reference})

    def untag(self, reference: str) -> None:
        image_id = self.tags.get(reference)
        super().untag(reference)
        if image_id in self.images:
            self.images[image_id]["RepoTags"] = [t for t in self.images[image_id]["RepoTags"] if t != reference]

    def push(self, reference: str) -> None:
        self.calls.append(("push", reference))
        image_id = self.tags[reference]
        config = self.configs_by_id[image_id]
        layers = [self.blobs[diff_id] for diff_id in self.images[image_id]["RootFS"]["Layers"]]
        body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                           "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": sha256_digest(config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar", "digest": sha256_digest(layer), "size": len(layer)}
                                      for layer in layers]}).encode()
        digest = self.registry.store(reference.rsplit(":", 1)[1], body, config, *layers)
        self.images[image_id]["RepoDigests"].append(f"{reference.rsplit(':', 1)[0]}@{digest}")


@pytest.fixture
def built(tmp_path, monkeypatch):
    """The tiny project locked and built on a pushing engine, the command line's engine and registry pointed at them; the
    registry takes only the login the engine client's config folder holds."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    manifest = project(tmp_path)
    engine = engine_with_base()
    engine.__class__ = PushingEngine
    engine.registry, engine.folder = MemoryRegistry(), tmp_path
    create_lock(engine, manifest)
    image = build_image(engine, manifest)
    engine.calls.clear()
    engine.hosts = []
    monkeypatch.setattr(commands, "Engine", lambda host: engine.hosts.append(host) or engine)
    (tmp_path / "config.json").write_text(json.dumps({"auths": {REGISTRY: {"auth": base64.b64encode(LOGIN.encode()).decode()}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-login-here"))
    monkeypatch.setattr(pusher, "RegistryClient", functools.partial(RegistryClient, certs_root=Path("/nonexistent"),
                                                                    transport=httpx.MockTransport(logged_in(engine.registry))))
    return engine, manifest, image


def logged_in(registry: MemoryRegistry):
    """The registry behind Basic auth: only the login stored in the engine client's config folder gets in."""
    def handle(request: httpx.Request) -> httpx.Response:
        if request.headers.get("Authorization") != "Basic " + base64.b64encode(LOGIN.encode()).decode():
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
        return registry.handle(request)
    return handle


def push(capsys, manifest, *extra) -> tuple[int, str, str]:
    code = cli.main(["push", "--manifest", str(manifest.path), "--registry", REGISTRY, "--host", "unix:///bake.sock", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_push_reads_back_and_records_what_nodes_pull(built, capsys):
    engine, manifest, image = built
    code, out, err = push(capsys, manifest, "--json")
    assert code == 0, err
    record = json.loads(out)
    tag = image.reference.rsplit(":", 1)[1]
    body = engine.registry.manifests[tag]
    assert record["status"] == "pushed" and record["pinned"].endswith("@" + sha256_digest(body))
    assert record["reference"].startswith(REGISTRY + "/") and record["reference"].endswith(":" + tag)
    assert record["config_digest"] == record["image_id"] == image.image_id
    assert record["new_layers"] == 2 and record["present_layers"] == 0
    assert json.loads((manifest.root / PUSHES_DIR / f"{tag}.json").read_text()) == record
    assert [c for c in engine.calls if c[0] == "push"] == [("push", record["reference"])]
    assert record["reference"] not in engine.tags, "the tag added for the push is removed again"
    assert ("remember_manifest", body) in engine.calls
    assert not [c for c in engine.calls if c[0] in ("create", "copy_out", "run_python")], "push verifies shallowly: no file is read back"


def test_the_text_says_what_was_pushed_uploaded_and_read_back(built, capsys):
    engine, manifest, image = built
    code, out, err = push(capsys, manifest)
    assert code == 0, err
    lines = out.splitlines()
    config_digest = image.image_id
    assert lines[0].startswith(f"pushed:    {REGISTRY}/") and lines[0].endswith(":" + image.reference.rsplit(":", 1)[1])
    assert engine.hosts == ["unix:///bake.sock"]
    assert lines[1].startswith(f"pull:      {REGISTRY}/") and "@sha256:" in lines[1] and lines[1].endswith("(what nodes pull)")
    assert lines[2].startswith("uploaded:  pushed 2 new layers")
    assert lines[3].startswith(f"read back: config {config_digest[:19]}… = image ID") and "2 layers, labels equal" in lines[3]
    assert lines[4] == f"record:    {PUSHES_DIR}/{image.reference.rsplit(':', 1)[1]}.json"
    code, out, err = push(capsys, manifest)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].endswith("(already present: nothing uploaded)") and lines[2] == "uploaded:  nothing"
    assert len([c for c in engine.calls if c[0] == "push"]) == 1


def test_an_image_that_fails_verification_is_never_pushed(built, capsys):
    engine, manifest, image = built
    engine.images[image.image_id]["Config"]["Labels"]["org.kvbake.tampered"] = "1"
    code, _, err = push(capsys, manifest)
    assert code == IntegrityError.exit_code and "label" in err
    assert engine.registry.manifests == {} and not (manifest.root / PUSHES_DIR).exists()
