"""Ordered, gated rollout on real node engines: the serve stand-in starts slowly and needs its peer; deploy and
rollback succeed only once it answers its readiness probe, and every failure to get ready reverts every node."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import socket
import struct
import subprocess
import sys
import termios
import time

import httpx
import pytest

from faultscenarios import without_running_flags
from kvbake.engines.adapters.client import Engine
from shiprig import REPO_ROOT, STANDIN_LAUNCHER, fleet_snapshot, reset_nodes, ship_with, write_deploy

pytestmark = [pytest.mark.docker, pytest.mark.once_on_containerd]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture()
def serving(rig, shipped, tmp_path):
    """A deployment whose ranks run the serve stand-in on the host network, workers first, gated on /health."""
    api, rendezvous = free_port(), free_port()
    env = {"STANDIN_SERVE": "1", "STANDIN_API_PORT": str(api), "STANDIN_RENDEZVOUS_PORT": str(rendezvous), "STANDIN_DELAY_S": "2"}

    def deployment(name: str, launcher: list[str] = STANDIN_LAUNCHER, url: str | None = None, **more_env: str):
        folder = tmp_path / name
        folder.mkdir()
        if (tmp_path / "first" / ".kvbake").exists():
            shutil.copytree(tmp_path / "first" / ".kvbake", folder / ".kvbake")
        readiness = {"url": url or f"http://127.0.0.1:{api}/health", "status": 200, "timeout_s": 20, "interval_s": 0.2}
        return write_deploy(folder, rig, launcher, env={**env, **more_env}, start="workers-first", readiness=readiness)

    yield deployment, api
    for key in ("a", "b"):
        Engine(rig[key].host).remove_container("kvbake-serve")


def deploy(capsys, shipped, deploy_file, preset: str):
    return ship_with(capsys, shipped, deploy_file, "deploy", "--preset", preset, "--image", shipped["digest"], "--reason", "gated")


def test_deploy_and_rollback_wait_for_a_serve_that_starts_slowly_and_needs_its_peer(capsys, shipped, rig, serving):
    deployment, api = serving
    first = deployment("first")
    started = time.monotonic()
    code, out, err = deploy(capsys, shipped, first, "control")
    assert code == 0, err
    assert time.monotonic() - started >= 2, "deploy returned before the serve's start-up delay"
    assert httpx.get(f"http://127.0.0.1:{api}/health", timeout=5).status_code == 200
    assert httpx.get(f"http://127.0.0.1:{api}/v1/models", timeout=5).json()["data"][0]["id"] == "standin"
    code, _, err = deploy(capsys, shipped, first, "packing-327680")
    assert code == 0, err
    code, _, err = ship_with(capsys, shipped, first, "rollback")
    assert code == 0, err
    assert httpx.get(f"http://127.0.0.1:{api}/health", timeout=5).status_code == 200


def test_a_readiness_url_that_never_answers_fails_a_first_deploy_and_leaves_the_nodes_new(capsys, shipped, rig, serving):
    """The revert of a first deploy has nothing to wait for: the nodes end as new as they were."""
    deployment, _ = serving
    reset_nodes(rig, shipped["repository"])
    wrong = deployment("wrong-url", url=f"http://127.0.0.1:{free_port()}/health")
    before = fleet_snapshot(rig, shipped, wrong)
    code, _, err = deploy(capsys, shipped, wrong, "control")
    assert code == 12 and "the serve never became ready: GET http://127.0.0.1:" in err and "answered no answer (ConnectError)" in err, err
    assert "within 20 s" in err and err.count("\n") == 1
    assert fleet_snapshot(rig, shipped, wrong) == before


def test_a_serve_that_never_gets_ready_reverts_every_node_to_the_ready_release(capsys, shipped, rig, serving):
    deployment, api = serving
    assert deploy(capsys, shipped, deployment("first"), "control")[0] == 0
    stalling = deployment("stalling", STANDIN_STALL_IF="VLLM_DSV41_KV_PAIR=3")
    before = fleet_snapshot(rig, shipped, stalling)
    code, _, err = deploy(capsys, shipped, stalling, "packing-327680")
    assert code == 12 and "the serve never became ready" in err and "answered 503, not 200, within 20 s" in err, err
    assert without_running_flags(fleet_snapshot(rig, shipped, stalling)) == without_running_flags(before)
    assert httpx.get(f"http://127.0.0.1:{api}/health", timeout=5).status_code == 200, "the previous serve is back and ready"


def test_a_switch_that_crashes_the_serve_at_start_up_reverts_every_node(capsys, shipped, rig, serving):
    deployment, api = serving
    assert deploy(capsys, shipped, deployment("first"), "control")[0] == 0
    crashing = deployment("crashing", STANDIN_CRASH_IF="VLLM_DSV41_KV_PAIR=3")
    before = fleet_snapshot(rig, shipped, crashing)
    code, _, err = deploy(capsys, shipped, crashing, "packing-327680")
    # Found right after its launcher returned, or while waiting for readiness: either way the crash is named.
    assert code == 12 and "VLLM_DSV41_KV_PAIR=3 is not supported by this serve" in err and "every node was reverted" in err, err
    assert "the serve died before it was ready" in err or "exited 0 but the serving container kvbake-serve on" in err, err
    assert without_running_flags(fleet_snapshot(rig, shipped, crashing)) == without_running_flags(before)
    assert httpx.get(f"http://127.0.0.1:{api}/health", timeout=5).status_code == 200


def test_a_launcher_that_exits_0_but_starts_nothing_reverts_every_node(capsys, shipped, rig, serving, tmp_path):
    """For the packing preset the launcher exits 0 and leaves the old serve in place; for control it works."""
    deployment, api = serving
    assert deploy(capsys, shipped, deployment("first"), "control")[0] == 0
    idle = tmp_path / "idle-launcher"
    idle.write_text(f"#!/bin/sh\ngrep -q KV_PAIR \"$KVBAKE_ENV_FILE\" && exit 0\nexec {' '.join(STANDIN_LAUNCHER)}\n")
    idle.chmod(0o755)
    lazy = deployment("idle", [str(idle)])
    before = fleet_snapshot(rig, shipped, lazy)
    code, _, err = deploy(capsys, shipped, lazy, "packing-327680")
    assert code == 12 and "launcher on spark-b exited 0 but the serving container kvbake-serve on spark-b is still the old one" in err, err
    assert without_running_flags(fleet_snapshot(rig, shipped, lazy)) == without_running_flags(before)
    assert httpx.get(f"http://127.0.0.1:{api}/health", timeout=5).status_code == 200


def build_py(argv: list[str], terminal: bool) -> tuple[int, str]:
    """`python build.py ARGV` as an operator runs it: on a pseudo-terminal (its standard output and error), or with
    both piped; the exit code and everything it printed."""
    command = [sys.executable, str(REPO_ROOT / "build.py"), *argv]
    if not terminal:
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
        return done.returncode, done.stdout + done.stderr
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 240, 0, 0))  # 240 columns: whole labels
    sized = {name: value for name, value in os.environ.items() if name not in ("COLUMNS", "LINES")}  # the terminal's own size
    with subprocess.Popen(command, cwd=REPO_ROOT, env=sized, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower) as process:
        os.close(follower)
        printed = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the program closed the terminal
                break
            if not chunk:
                break
            printed += chunk
        os.close(leader)
        return process.wait(timeout=300), printed.decode(errors="replace")


def test_on_a_terminal_the_pulls_and_the_readiness_wait_show_their_elapsed_time_and_piped_output_stays_plain(shipped, rig, serving):
    deployment, api = serving
    reset_nodes(rig, shipped["repository"])
    for key in ("a", "b"):
        Engine(rig[key].host).remove_image(shipped["digest"])
    deploy_file = deployment("terminal")
    files = ["--manifest", str(shipped["manifest"]), "--deploy", str(deploy_file)]
    code, printed = build_py(["deploy", "--preset", "control", "--image", shipped["digest"], "--reason", "on a terminal", *files], True)
    assert code == 0, printed
    pulled = shipped["digest"][:shipped["digest"].index("@sha256:") + 20]  # its line names the digest's first 12 digits
    for label in (f"pull {pulled} on {rig['a'].host}", f"pull {pulled} on {rig['b_host']}",
                  f"wait for GET http://127.0.0.1:{api}/health to answer 200"):
        finished = [line for line in printed.split("\r") if label in line and "done" in line]
        assert finished and re.search(r"\d:\d\d:\d\d", finished[-1]), f"{label!r} never finished with its time: {printed!r}"
    assert "last answer: 200" in printed, "the wait's last detail is the probe's answer"
    code, printed = build_py(["deploy", "--preset", "packing-327680", "--image", shipped["digest"], "--reason", "piped", *files], False)
    assert code == 0, printed
    assert "\x1b[" not in printed and "wait for GET" not in printed and f"pull {shipped['digest']}" not in printed, printed
    code, printed = build_py(["rollback", "--json", *files], True)
    assert code == 0 and "\x1b[" not in printed and "wait for GET" not in printed, "--json stays plain on a terminal"
    assert httpx.get(f"http://127.0.0.1:{api}/health", timeout=5).status_code == 200
