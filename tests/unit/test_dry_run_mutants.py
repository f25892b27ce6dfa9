"""The dry run of real launchers: the engine-less DOCKER_HOST they see, what each node is told, and each launcher refusal."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fake_fleet import PACKING, REPO
from kvbake.deployfile import Deployment, Launcher, Node
from kvbake.errors import RolloutError
from kvbake.ship.adapters.dry_run import NO_ENGINE_SOCKET, dry_run
from message_words import says

NODES = (Node("spark-a", "ssh://ops@spark-a", "head"), Node("spark-b", "ssh://ops@spark-b", "worker"))


def deployment(*command: str, timeout_s: float = 60) -> Deployment:
    return Deployment(Path("/p/deploy.yaml"), NODES, Launcher(tuple(command), "vllm-serve", timeout_s), 900)


def python_launcher(code: str, timeout_s: float = 60) -> Deployment:
    return deployment(sys.executable, "-c", code, timeout_s=timeout_s)


def refusal(launcher: Deployment) -> RolloutError:
    with pytest.raises(RolloutError) as caught:
        dry_run(launcher, REPO, PACKING)
    return caught.value


def test_the_launcher_sees_a_docker_host_in_the_dry_runs_own_temporary_folder() -> None:
    reports = dry_run(python_launcher("import os; print(os.environ['DOCKER_HOST'])"), REPO, PACKING)
    for report in reports:
        printed = report.calls[0]
        assert printed.startswith("unix://")
        socket = Path(printed.removeprefix("unix://"))
        assert socket.name == NO_ENGINE_SOCKET and socket.parent.name.startswith("kvbake-dry-run-")
        assert report.variables["DOCKER_HOST"].startswith("ssh://ops@")


def test_each_node_is_told_the_repositorys_current_image_and_the_release_switches() -> None:
    reports = dry_run(python_launcher("pass"), REPO, PACKING)
    assert [r.variables["KVBAKE_IMAGE"] for r in reports] == [f"{REPO}:current"] * 2
    assert [r.ranks_env for r in reports] == [("S=3",)] * 2


def test_a_launcher_that_cannot_be_started_is_named_with_the_reason() -> None:
    error = refusal(deployment("/nonexistent/kvbake-launcher"))
    assert says(error.message, "launcher on spark-a did not run") and says(error.message, "FileNotFoundError")
    assert says(error.fix, "check launcher.command")


def test_a_launcher_that_outlives_its_timeout_is_refused() -> None:
    error = refusal(python_launcher("import time; time.sleep(30)", timeout_s=0))
    assert says(error.message, "TimeoutExpired")


def test_a_launcher_that_fails_silently_is_said_to_have_given_no_output() -> None:
    error = refusal(python_launcher("raise SystemExit(3)"))
    assert says(error.message, "exited 3") and says(error.message, "(no output)")
    assert says(error.fix, "docs/launcher.md")
