"""`build.py push` against real registries (plain, and TLS + htpasswd) and the real engine: read-back, overwrite rule, bytes."""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import signal
import tarfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.errors import RegistryError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.bake.core.plan import make_plan, read_overlay
from kvbake.ship.adapters.pusher import push_image
from kvbake_rig import Credentials, LocalRegistry, login, private_client, write_htpasswd
from kvbake_rig.ports import free_port
from kvbake_rig.processes import spawn, wait_until
from kvbake_rig.registry import REGISTRY_BINARY

from conftest import run, tags_of
from tiny import TINY_BASE, base_tar, write_project

pytestmark = [pytest.mark.docker, pytest.mark.every_engine]  # bake and push are proven on Docker 20.10 too
ACCEPT = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
BIG_LAYER_MB = 200
UPLOAD_WAIT_SECONDS = 300.0


@pytest.fixture()
def registry(tmp_path: Path) -> Iterator[LocalRegistry]:
    with LocalRegistry(tmp_path / "registry") as running:
        yield running


def build(capsys, manifest: Path) -> dict:
    code, out, err = run(capsys, "build", "--manifest", str(manifest), "--json")
    assert code == 0, err
    return json.loads(out)


def push(capsys, manifest: Path, address: str, *extra: str) -> tuple[int, str, str]:
    return run(capsys, "push", "--manifest", str(manifest), "--registry", address, *extra)


def push_json(capsys, manifest: Path, address: str) -> dict:
    code, out, err = push(capsys, manifest, address, "--json")
    assert code == 0, err
    return json.loads(out)


def one_line_error(err: str, fragment: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error (registry): ") and fragment in lines[0] and "fix:" in lines[0], err
    return lines[0]


def docker_push_as(engine: Engine, image: str, reference: str) -> None:
    """Put another image at `reference` in the registry with plain docker, then drop the local tag."""
    engine.tag(image, reference)
    engine.client.image.push(reference, quiet=True)
    engine.untag(reference)


def pushed_tags(engine: Engine, address: str) -> set[str]:
    """Local tags in the registry's namespace (an image found by its repo digest lists all its tags)."""
    return {tag for tag in tags_of(engine, f"{address}/tiny") if tag.startswith(f"{address}/")}


def remote(registry: LocalRegistry, path: str, auth: tuple[str, str] | None = None) -> httpx.Response:
    with registry.endpoint.http_client() as http:
        return http.get(path, headers={"Accept": ACCEPT}, auth=auth)


def test_push_reads_back_records_and_is_a_no_op_the_second_time(capsys, engine, tiny, registry):
    built = build(capsys, tiny)
    record = push_json(capsys, tiny, registry.address)
    tag = built["image"].rsplit(":", 1)[1]
    assert record["reference"] == f"{registry.address}/tiny:{tag}" and record["status"] == "pushed"
    assert record["config_digest"] == built["config_digest"] and record["image_id"] == built["image_id"]
    reply = remote(registry, f"/v2/tiny/manifests/{tag}")
    assert reply.headers["Docker-Content-Digest"] == record["manifest_digest"]
    assert record["pinned"] == f"{registry.address}/tiny@{record['manifest_digest']}"
    layer_sizes = [layer["size"] for layer in reply.json()["layers"]]
    assert [layer["size"] for layer in record["layers"]] == layer_sizes and len(layer_sizes) == 2
    assert record["uploaded_bytes"] == sum(layer_sizes) + reply.json()["config"]["size"]
    assert record["thin_layer_compressed_bytes"] == layer_sizes[-1]
    assert json.loads((tiny.parent / f".kvbake/pushes/{tag}.json").read_text()) == record
    assert pushed_tags(engine, registry.address) == set()

    code, out, err = push(capsys, tiny, registry.address)
    assert code == 0, err
    assert "already present: nothing uploaded" in out and f"pull:      {record['pinned']}" in out
    again = json.loads((tiny.parent / f".kvbake/pushes/{tag}.json").read_text())
    assert again["status"] == "already present" and again["uploaded_bytes"] == 0
    assert again["manifest_digest"] == record["manifest_digest"]


def test_only_the_thin_layer_uploads_when_the_base_is_in_the_registry(capsys, engine, tiny, registry):
    build(capsys, tiny)
    docker_push_as(engine, TINY_BASE, f"{registry.address}/tiny:base")
    code, out, err = push(capsys, tiny, registry.address)
    assert code == 0, err
    record = json.loads(next((tiny.parent / ".kvbake/pushes").iterdir()).read_text())
    base_blob = remote(registry, "/v2/tiny/manifests/base").json()["layers"][0]
    assert record["layers"][0] == {"digest": base_blob["digest"], "size": base_blob["size"], "new": False}
    assert record["new_layers"] == 1 and record["present_layers"] == 1 and record["layers"][1]["new"]
    config_size = remote(registry, f"/v2/tiny/manifests/{record['manifest_digest']}").json()["config"]["size"]
    assert record["uploaded_bytes"] == record["thin_layer_compressed_bytes"] + config_size
    assert "pushed 1 new layer" in out and "1 base layer already present" in out
    print(f"base layer {base_blob['size']} B already present; uploaded {record['uploaded_bytes']} B "
          f"(thin layer {record['thin_layer_compressed_bytes']} B compressed + config {config_size} B)")


def test_a_tag_that_holds_other_content_is_never_overwritten(capsys, engine, tiny, registry):
    built = build(capsys, tiny)
    tag = built["image"].rsplit(":", 1)[1]
    docker_push_as(engine, TINY_BASE, f"{registry.address}/tiny:{tag}")
    held = remote(registry, f"/v2/tiny/manifests/{tag}")
    code, _, err = push(capsys, tiny, registry.address)
    assert code == 11
    line = one_line_error(err, "already holds other content")
    assert held.json()["config"]["digest"] in line and built["config_digest"] in line and "fix: bump the manifest" in line
    assert remote(registry, f"/v2/tiny/manifests/{tag}").headers["Docker-Content-Digest"] == held.headers["Docker-Content-Digest"]
    assert not (tiny.parent / ".kvbake/pushes").exists()


def test_an_unreachable_registry_is_one_line(capsys, engine, tiny):
    build(capsys, tiny)
    address = f"127.0.0.1:{free_port()}"
    code, _, err = push(capsys, tiny, address)
    assert code == 11
    one_line_error(err, f"registry {address} is unreachable")
    assert pushed_tags(engine, address) == set()


def test_a_tag_changed_between_push_and_read_back_is_caught(capsys, engine, tiny, registry, monkeypatch):
    build(capsys, tiny)
    real_push = Engine.push

    def racing_push(self: Engine, reference: str) -> None:
        real_push(self, reference)
        self.tag(TINY_BASE, reference)
        real_push(self, reference)

    monkeypatch.setattr(Engine, "push", racing_push)
    code, _, err = push(capsys, tiny, registry.address)
    assert code == 11
    line = one_line_error(err, "does not read back as pushed")
    assert "is not the local image's" in line and "diff_ids" in line and "labels differ" in line
    assert not (tiny.parent / ".kvbake/pushes").exists()
    assert pushed_tags(engine, registry.address) == set()


def store_with(folder: Path, address: str, username: str, password: str) -> Path:
    folder.mkdir(parents=True)
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    (folder / "config.json").write_text(json.dumps({"auths": {address: {"auth": auth}}}))
    return folder


def test_tls_and_htpasswd_use_the_engines_login_store_and_leak_nothing(capsys, caplog, engine, tiny, tmp_path, monkeypatch):
    credentials = Credentials.generate("pusher")
    htpasswd = write_htpasswd(tmp_path / "auth" / "htpasswd", credentials)
    basic = base64.b64encode(f"{credentials.username}:{credentials.password}".encode()).decode()
    build(capsys, tiny)
    with LocalRegistry(tmp_path / "registry", tls=True, htpasswd=htpasswd, username="pusher") as secured:
        address = secured.address
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty-store"))
        code, _, err = push(capsys, tiny, address)
        assert code == 11
        one_line_error(err, "requires a login")
        monkeypatch.setenv("DOCKER_CONFIG", str(store_with(tmp_path / "wrong-store", address, "pusher", "wrong-password")))
        code, _, err = push(capsys, tiny, address)
        assert code == 11 and "wrong-password" not in err
        one_line_error(err, "refused the stored credentials of user pusher")

        login(private_client(tmp_path / "store"), address, credentials)
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "store"))
        caplog.set_level(logging.DEBUG)
        code, out, err = push(capsys, tiny, address, "--debug", "--json")
        assert code == 0, err
        record = json.loads(out)
        reply = remote(secured, f"/v2/tiny/manifests/{record['manifest_digest']}", (credentials.username, credentials.password))
        assert reply.status_code == 200 and record["registry"] == address
    seen = out + err + caplog.text + (tiny.parent / ".kvbake/pushes" / f"{record['reference'].rsplit(':', 1)[1]}.json").read_text()
    assert "registry 127.0.0.1" in caplog.text or "answers over https" in caplog.text
    assert credentials.password not in seen and basic not in seen
    labels = engine.inspect_image(record["image_id"])["Config"]["Labels"]
    assert credentials.password not in json.dumps(labels)


def big_project(engine: Engine, root: Path) -> tuple[Path, str]:
    """The tiny project on a base with one ~200 MB random layer; returns (manifest, base reference)."""
    archive = root / "big-base.tar"
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w") as out, tarfile.open(fileobj=io.BytesIO(base_tar())) as small:
        for member in small:
            out.addfile(member, small.extractfile(member) if member.isfile() else None)
        blob = root / "random.bin"
        with blob.open("wb") as handle:
            for _ in range(BIG_LAYER_MB):
                handle.write(os.urandom(1 << 20))
        out.add(blob, arcname="srv/random.bin")
    blob.unlink()
    reference = f"kvbake-test/tiny-big:{uuid.uuid4().hex[:12]}"
    engine.client.image.import_(archive, tag=reference)
    archive.unlink()
    manifest = write_project(root / "project")
    manifest.write_text(manifest.read_text().replace(f'"{TINY_BASE}"', f'"{reference}"'))
    return manifest, reference


def upload_started(registry: LocalRegistry) -> bool:
    uploads = registry.root / "storage/docker/registry/v2/repositories/tiny/_uploads"
    return uploads.is_dir() and any(data.stat().st_size > 0 for data in uploads.glob("*/data"))


def restart_on_same_port(registry: LocalRegistry) -> None:
    registry.daemon = spawn([REGISTRY_BINARY, "serve", str(registry.root / "config.yml")], registry.root / "registry.log")

    def answers() -> bool:
        try:
            with registry.endpoint.http_client() as http:
                return http.get("/v2/").status_code == 200
        except httpx.HTTPError:
            return False

    assert wait_until(answers, 30.0), "the registry did not come back"


def test_a_registry_killed_mid_push_is_a_clean_error_and_a_retry_succeeds(capsys, engine, registry, tmp_path):
    manifest, base = big_project(engine, tmp_path / "big")
    derived = None
    try:
        assert run(capsys, "lock", "--manifest", str(manifest))[0] == 0
        derived = build(capsys, manifest)["image"]
        loaded = load_manifest(manifest)
        lock = read_lock(loaded)
        plan = make_plan(loaded, lock, read_overlay(loaded, lock))
        failure: list[BaseException] = []

        def pushing() -> None:
            try:
                push_image(Engine(), plan, registry.address)
            except BaseException as err:  # handed to the test thread
                failure.append(err)

        worker = threading.Thread(target=pushing)
        worker.start()
        assert wait_until(lambda: upload_started(registry) or not worker.is_alive(), UPLOAD_WAIT_SECONDS)
        assert worker.is_alive(), f"the push ended before its upload was seen: {failure}"
        os.kill(registry.daemon.ref.pid, signal.SIGKILL)
        assert wait_until(registry.daemon.exited, 30.0)
        worker.join()
        assert len(failure) == 1 and isinstance(failure[0], RegistryError), failure
        message = failure[0].one_line()
        assert "\n" not in message and "push of" in message and "fix:" in message
        assert pushed_tags(engine, registry.address) == set()

        restart_on_same_port(registry)
        record = push_json(capsys, manifest, registry.address)
        assert record["status"] == "pushed" and record["new_layers"] == 2
        assert record["uploaded_bytes"] > BIG_LAYER_MB << 20
        print(f"killed mid-push: {message}")
        print(f"retry uploaded {record['uploaded_bytes']} B; thin layer {record['thin_layer_compressed_bytes']} B compressed")
    finally:
        for reference in (derived, base):
            if reference:
                engine.remove_image(reference)
