"""Integration fixtures: a locked tiny project on the real engine, and leftover checks."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from kvbake.cli import main
from kvbake.engines.adapters.client import Engine
from kvbake_rig import LocalRegistry, LoopbackSshd, NodeEngine, prepare_ssh_client

from tiny import import_base, write_project

pytestmark = pytest.mark.docker


@pytest.fixture(scope="session", autouse=True)
def engine_gate(engine: Engine) -> Engine:
    """Every integration test first passes the engine check: no engine fails the run, or is a loud skip when asked."""
    return engine


@pytest.fixture(scope="session")
def tiny_base(engine: Engine) -> str:
    return import_base(engine)


@pytest.fixture(scope="session")
def locked_tiny_template(engine: Engine, tiny_base: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tiny-template")
    manifest = write_project(root)
    assert main(["lock", "--manifest", str(manifest)]) == 0
    return root


@pytest.fixture()
def tiny(locked_tiny_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh copy of the locked tiny project; temp files go to a private folder that must end empty."""
    root = tmp_path / "project"
    shutil.copytree(locked_tiny_template, root, ignore=shutil.ignore_patterns(".kvbake"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return root / "manifest.yaml"


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def tags_of(engine: Engine, repository: str) -> set[str]:
    images = engine.client.image.list(repository_or_tag=repository)
    return {tag for image in images for tag in image.repo_tags}


def leftover_containers(engine: Engine) -> list[str]:
    """Extraction containers this test process left behind (others may run their own builds meanwhile)."""
    mine = [("label", f"org.kvbake.extract.pid={os.getpid()}")]
    return [c.name for c in engine.client.container.list(all=True, filters=mine)]


def ship_standin(folder: Path, registry_address: str, base: str | None = None, name: str = "standin-kvpack") -> tuple[Path, dict]:
    """A copy of the stand-in example aimed at `registry_address` (as repository `name`, on another `base` image of the
    same source root when given), locked, built and pushed; its manifest and push record."""
    standin = Path(__file__).resolve().parents[2] / "examples" / "standin"
    shutil.copytree(standin, folder, ignore=shutil.ignore_patterns(".kvbake"))
    manifest = folder / "manifest.yaml"
    repository = f"{registry_address}/kvbake/{name}"
    text = manifest.read_text().replace("127.0.0.1:5000/kvbake/standin-kvpack", repository)
    manifest.write_text(text.replace("image: kvbake-standin/vllm-base:0.33.0\n", f"image: {base}\n") if base else text)
    # This machine's stand-in base is its own build, not the one the committed lock pins: re-pin on purpose.
    assert main(["lock", "--manifest", str(manifest), "--rebase-base"]) == 0, "lock of the stand-in failed"
    for command in ("build", "push"):
        assert main([command, "--manifest", str(manifest)]) == 0, f"{command} of the stand-in failed"
    record = json.loads(next((folder / ".kvbake" / "pushes").glob("*.json")).read_text())
    assert record["pinned"].startswith(repository + "@sha256:")
    return manifest, record


@pytest.fixture(scope="session")
def rig(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The ship rig, shared by the deploy test modules: a plain registry, node A and node B on unix sockets, and node
    B also through ssh (`b_ssh`, for the tests of the ssh path: each docker call over ssh costs about 0.6 s); both
    nodes hold the stand-in base."""
    from shiprig import BASE

    root = tmp_path_factory.mktemp("ship")
    ssh_client = prepare_ssh_client(root / "ssh-client")
    with pytest.MonkeyPatch.context() as patch, LocalRegistry(root / "registry") as registry, \
            NodeEngine(root / "a", name="a") as node_a, NodeEngine(root / "b", name="b") as node_b, \
            LoopbackSshd(root / "sshd", ssh_client, node_b.host) as gateway:
        patch.setenv("PATH", ssh_client.env()["PATH"])
        for node in (node_a, node_b):
            node.client().image.load(engine.client.image.save(BASE))
        yield {"root": root, "registry": registry, "a": node_a, "b": node_b, "b_host": node_b.host, "b_ssh": gateway.ssh_host()}


@pytest.fixture(scope="session")
def launcher_rig(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The community launchers' two node engines and serving image, shared by every launcher walk of a run (the walks
    run one after the other, each leaving empty nodes): one engine pair and one pull of the image per run."""
    from launcherwalk import launcher_nodes  # imports this module's `run`: read when the first walk starts
    with launcher_nodes(engine, tmp_path_factory.mktemp("launchers")) as nodes:
        yield nodes


@pytest.fixture(scope="session")
def shipped(engine: Engine, rig: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The stand-in, locked for the rig's registry, built and pushed; returns paths and the digest reference."""
    from shiprig import STANDIN_LAUNCHER, write_deploy

    folder = tmp_path_factory.mktemp("standin") / "standin"
    manifest, record = ship_standin(folder, rig["registry"].address)
    digest = record["pinned"]
    return {"manifest": manifest, "digest": digest, "deploy": write_deploy(folder, rig, STANDIN_LAUNCHER), "folder": folder,
            "repository": digest.split("@")[0]}
