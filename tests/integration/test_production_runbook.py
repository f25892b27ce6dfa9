"""docs/production.md's walk-through on the stand-in rig: the steps the runbook lists, in its order, each one run for
real (doctor, base sync, adopt, deploy with readiness, validate, rollback to the adopted serve, packing, rollback)."""

from __future__ import annotations

import re
import shlex
import socket
from pathlib import Path

import httpx
import pytest

from kvbake.engine import Engine
from tests.doubles.openai_double import OpenAIDouble

from conftest import run
from shiprig import BAKED, BASE, CONTAINER, STANDIN_LAUNCHER, reset_nodes, serving_env, write_deploy

pytestmark = [pytest.mark.docker, pytest.mark.default_engine_only]  # engine-independent: the default engine is enough
ROOT = Path(__file__).resolve().parents[2]
SMALL = ("--prefix-tokens", "2000", "--corruption-tokens", "2000", "--depths", "1000,3000")


def runbook_steps() -> list[list[str]]:
    text = (ROOT / "docs" / "production.md").read_text()
    block = text.split("<!-- runbook-steps -->", 1)[1].split("<!-- /runbook-steps -->", 1)[0]
    return [shlex.split(command)[1:] for command in re.findall(r"^\d+\. `([^`]+)`$", block, re.MULTILINE)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_bind_mount_serve(rig: dict, env: dict[str, str], patched: Path) -> None:
    """The serve the seed runs on each node: the base image, a patched file bind-mounted over the source, started by
    hand; here the serve stand-in, so that it answers the readiness probe too."""
    source = (ROOT / "scripts" / "standin_serve.py").read_text()
    for key, role in (("a", "head"), ("b", "worker")):
        argv = [role, env["STANDIN_API_PORT"], env["STANDIN_RENDEZVOUS_PORT"], "1", "0", "127.0.0.1", f"spark-{key}"]
        rig[key].client().run(BASE, ["-c", source, *argv], entrypoint="python3", name=CONTAINER, detach=True, networks=["host"],
                              volumes=[(str(patched), BAKED, "ro")], restart="unless-stopped")


@pytest.fixture()
def walk(rig, shipped, tmp_path):
    reset_nodes(rig, shipped["repository"])
    api = free_port()
    env = {"STANDIN_SERVE": "1", "STANDIN_API_PORT": str(api), "STANDIN_RENDEZVOUS_PORT": str(free_port()), "STANDIN_DELAY_S": "1"}
    ops = shipped["manifest"].parent / "ops"
    ops.mkdir(exist_ok=True)
    deploy_file = write_deploy(ops, rig, STANDIN_LAUNCHER, env=env, start="workers-first",
                               readiness={"url": f"http://127.0.0.1:{api}/health", "timeout_s": 60, "interval_s": 0.2})
    patched = tmp_path / "kv_cache_interface.py"
    patched.write_text("# the bind-mounted file of the seed's serve\n")
    start_bind_mount_serve(rig, env, patched)
    with OpenAIDouble() as double:
        yield {"deploy": deploy_file, "api": api, "endpoint": double.url}
    for key in ("a", "b"):
        Engine(rig[key].host).remove_container(f"{CONTAINER}-kvbake-adopted")
    reset_nodes(rig, shipped["repository"])


def extras(step: list[str], walk: dict, rig: dict) -> list[str]:
    """What the rig adds to a runbook command: its registry, floors fit for a test machine, the validation endpoint."""
    command = step[0]
    if command == "doctor":
        return ["--registry", rig["registry"].address, "--disk-floor", "0.1", "--mem-floor", "0.1"]
    if command == "base":
        return ["--registry", rig["registry"].address]
    if command == "validate":
        return ["--endpoint", walk["endpoint"], *SMALL]
    return []


def test_the_runbook_walks_from_the_bind_mount_serve_to_packing_and_back(capsys, shipped, rig, walk):
    steps = runbook_steps()
    assert [s[0] for s in steps] == ["doctor", "base", "adopt", "deploy", "validate", "rollback", "deploy", "deploy", "validate", "rollback"]
    adopted = {key: Engine(rig[key].host).container_inspect(CONTAINER)["Id"] for key in ("a", "b")}
    for number, step in enumerate(steps, 1):
        argv = [walk["deploy"] if word == "deploy.yaml" else word for word in step]
        code, out, err = run(capsys, *map(str, argv), "--manifest", str(shipped["manifest"]), *extras(step, walk, rig))
        assert code == 0, f"runbook step {number} ({' '.join(step)}) failed: {out[-1500:]} {err}"
        assert httpx.get(f"http://127.0.0.1:{walk['api']}/health", timeout=5).status_code == 200, f"not serving after step {number}"
        if number == 6:
            assert {k: Engine(rig[k].host).container_inspect(CONTAINER)["Id"] for k in ("a", "b")} == adopted, "the adopted serve is back"
    assert serving_env(rig["a"]) == serving_env(rig["b"]) == set()
    code, out, err = run(capsys, "status", "--json", "--manifest", str(shipped["manifest"]), "--deploy", str(walk["deploy"]))
    assert code == 0 and '"preset": "control"' in out, out + err
