"""The base's life on real engines: `base sync` (registry once, every node by digest, idempotent, a foreign tag moved
only with --force), a digest-pinned base, and `lock` refusing to re-pin a base whose tag now names another image."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterator

import pytest

from kvbake.engines.adapters.client import Engine

from conftest import run
from shiprig import STANDIN_LAUNCHER, write_deploy
from tiny import TINY_BASE, import_base

pytestmark = pytest.mark.docker
ANOTHER = ("pkg/extra.py",)  # another base under the same tag: one more file, the chain still applies
HOLD = "kvbake-test/tiny-hold:1"


@contextlib.contextmanager
def base_hidden(engine: Engine) -> Iterator[str]:
    """The tiny base without its tag (kept alive by a holding tag); the tag comes back afterwards."""
    image_id = engine.image_id_of(TINY_BASE)
    engine.tag(image_id, HOLD)
    engine.untag(TINY_BASE)
    try:
        yield image_id
    finally:
        engine.tag(image_id, TINY_BASE)
        engine.untag(HOLD)


def aimed_at(tiny: Path, registry: str, repository: str) -> Path:
    """The tiny project with its output in the rig's registry, locked again (the output is part of the image)."""
    tiny.write_text(tiny.read_text().replace('repository: "127.0.0.1:5000/tiny"', f'repository: "{registry}/{repository}"'))
    assert run_ok(tiny, "lock")
    return tiny


def run_ok(manifest: Path, *argv: str) -> bool:
    from kvbake.cli import main

    return main([*argv, "--manifest", str(manifest)]) == 0


def node_config(node, reference: str) -> str | None:
    engine = Engine(node.host)
    inspect = engine.inspect_image(reference)
    return engine.config_digest_of(inspect, reference) if inspect else None


def forget_tiny_base(rig: dict) -> None:
    for key in ("a", "b"):
        engine = Engine(rig[key].host)
        for image in engine.client.image.list(repository_or_tag="kvbake-test/tiny"):
            engine.client.image.remove(image.id, force=True)


@pytest.fixture()
def project(tiny, rig, tmp_path, capsys):
    forget_tiny_base(rig)
    manifest = aimed_at(tiny, rig["registry"].address, f"tiny-{tmp_path.name.lower().replace('_', '-')[-24:].strip('-')}")
    (tmp_path / "ops").mkdir()
    deploy_file = write_deploy(tmp_path / "ops", rig, STANDIN_LAUNCHER)
    capsys.readouterr()  # the set-up's own output
    yield manifest, deploy_file, json.loads(manifest.with_name("manifest.lock.json").read_text())["base"]["config_digest"]
    forget_tiny_base(rig)


def sync(capsys, manifest: Path, deploy_file: Path, *extra: str) -> tuple[int, dict | str]:
    code, out, err = run(capsys, "base", "sync", "--manifest", str(manifest), "--deploy", str(deploy_file), "--json", *extra)
    return code, (json.loads(out) if code == 0 else err)


def test_base_sync_pushes_once_pulls_by_digest_and_is_idempotent(capsys, rig, project):
    manifest, deploy_file, config = project
    code, first = sync(capsys, manifest, deploy_file)
    assert code == 0, first
    assert first["pushed"] is True and [n["action"] for n in first["nodes"]] == ["pull", "pull"]
    assert first["node_name"] == TINY_BASE and "@sha256:" in first["pinned"]
    assert node_config(rig["a"], TINY_BASE) == node_config(rig["b"], TINY_BASE) == config
    code, again = sync(capsys, manifest, deploy_file)
    assert code == 0, again
    assert again["pushed"] is False and again["pinned"] == first["pinned"] and [n["action"] for n in again["nodes"]] == ["present", "present"]


def test_base_sync_reads_no_docker_save_of_a_base_the_nodes_pulled(capsys, rig, project, tmp_path, monkeypatch, caplog):
    """With no manifest cached on this host, a second sync still reads every node's base identity without a `docker
    save` (on the containerd store the manifest comes from the registry by the node's image ID)."""
    import logging

    manifest, deploy_file, config = project
    assert sync(capsys, manifest, deploy_file)[0] == 0
    monkeypatch.setenv("KVBAKE_CACHE_DIR", str(tmp_path / "empty-cache"))
    with caplog.at_level(logging.INFO, logger="kvbake"):
        code, again = sync(capsys, manifest, deploy_file)
    assert code == 0 and [n["action"] for n in again["nodes"]] == ["present", "present"], again
    assert [r.getMessage() for r in caplog.records if "docker save" in r.getMessage()] == []


def test_a_node_whose_tag_names_another_image_is_refused_and_moved_only_with_force(capsys, rig, project):
    manifest, deploy_file, config = project
    other = import_base(Engine(rig["b"].host), TINY_BASE, extra=ANOTHER)
    other_config = node_config(rig["b"], TINY_BASE)
    assert other_config != config
    code, err = sync(capsys, manifest, deploy_file)
    assert code == 6 and f"node spark-b: {TINY_BASE} names another image (config {other_config[:19]})" in err, err
    assert "nothing was moved" in err and "--force" in err and err.count("\n") == 1
    assert node_config(rig["a"], TINY_BASE) is None and node_config(rig["b"], TINY_BASE) == other_config
    code, moved = sync(capsys, manifest, deploy_file, "--force")
    assert code == 0, moved
    assert [n["action"] for n in moved["nodes"]] == ["pull", "move"] and moved["nodes"][1]["held_before"] == other_config
    assert node_config(rig["b"], TINY_BASE) == config
    assert Engine(rig["b"].host).inspect_image(other) is not None, "the other image stays, untagged"


def test_no_base_in_the_registry_and_none_here_is_one_line(capsys, engine, rig, project):
    manifest, deploy_file, _ = project
    with base_hidden(engine):
        code, err = sync(capsys, manifest, deploy_file)
    assert code == 6 and "the locked base is not in the registry (" in err and f"), and {TINY_BASE} is not present on" in err, err
    assert err.count("\n") == 1
    assert node_config(rig["a"], TINY_BASE) is None and node_config(rig["b"], TINY_BASE) is None


def test_a_digest_pinned_base_locks_builds_and_reaches_the_nodes_under_its_node_name(capsys, engine, rig, project):
    manifest, deploy_file, config = project
    code, synced = sync(capsys, manifest, deploy_file)
    assert code == 0, synced
    pinned = synced["pinned"]
    engine.pull(pinned)  # the operator's own pull on the build host: kvbake never pulls
    manifest.write_text(manifest.read_text().replace(f'image: "{TINY_BASE}"', f'image: "{pinned}"'))
    code, out, err = run(capsys, "lock", "--manifest", str(manifest))
    assert code == 0, err
    locked = json.loads(manifest.with_name("manifest.lock.json").read_text())["base"]
    assert (locked["reference"], locked["config_digest"]) == (pinned, config)
    code, out, err = run(capsys, "build", "--manifest", str(manifest), "--json")
    assert code == 0 and json.loads(out)["image"].rsplit(":", 1)[1].startswith("sha256-" + pinned.rsplit(":", 1)[1][:12]), out + err
    forget_tiny_base(rig)
    code, again = sync(capsys, manifest, deploy_file)
    node_name = f"{pinned.split('@')[0]}:sha256-{pinned.rsplit(':', 1)[1][:12]}"
    assert code == 0 and again["node_name"] == node_name, again
    assert node_config(rig["a"], node_name) == node_config(rig["b"], node_name) == config


def test_a_digest_pinned_base_that_is_not_local_is_refused(capsys, engine, tiny):
    missing = f"kvbake-test/tiny@sha256:{'0' * 64}"
    tiny.write_text(tiny.read_text().replace(f'image: "{TINY_BASE}"', f'image: "{missing}"'))
    code, _, err = run(capsys, "lock", "--manifest", str(tiny))
    assert code == 6 and f"{missing} is not present" in err and "never pulls" in err and err.count("\n") == 1, err


def test_lock_refuses_to_repin_a_base_whose_tag_now_names_another_image(capsys, engine, tiny):
    lock_path = tiny.with_name("manifest.lock.json")
    before = lock_path.read_bytes()
    with base_hidden(engine):
        other = import_base(engine, TINY_BASE, extra=ANOTHER)
        try:
            code, _, err = run(capsys, "lock", "--manifest", str(tiny))
            assert code == 6 and f"{TINY_BASE} now names another image" in err and "lock --rebase-base" in err, err
            assert err.count("\n") == 1 and lock_path.read_bytes() == before
            code, _, err = run(capsys, "lock", "--manifest", str(tiny), "--rebase-base")
            assert code == 0, err
            other_config = engine.config_digest_of(engine.inspect_image(TINY_BASE), TINY_BASE)
            assert json.loads(lock_path.read_text())["base"]["config_digest"] == other_config != json.loads(before)["base"]["config_digest"]
        finally:
            engine.client.image.remove(other, force=True)
