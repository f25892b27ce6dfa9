"""`deploy --dry-run` without an engine: every node's launcher variables and printed engine calls; nothing changes."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from kvbake.cli import main

ROOT = Path(__file__).resolve().parents[2]
# The reference launcher's console script, run through this interpreter so that it also runs where kvbake is importable
# but not installed (the mutation run's copy).
LAUNCH_VLLM = [sys.executable, "-c", "from kvbake.launcher.cli import main; main()"]
IMAGE = "127.0.0.1:5000/kvbake/standin-kvpack@sha256:" + "ab" * 32
SPARK_A = {"env": {"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f0np0"}, "devices": ["/dev/infiniband"],
           "cap_add": ["IPC_LOCK"], "ulimits": {"memlock": -1, "stack": 67108864}, "shm_size": "32g",
           "cache_mounts": ["/srv/cache/huggingface:/root/.cache/huggingface"]}


def project(tmp_path: Path, launcher: list[str] | None = None, launch_a: dict | None = None, env: dict | None = None) -> Path:
    folder = tmp_path / "standin"
    shutil.copytree(ROOT / "examples" / "standin", folder, ignore=shutil.ignore_patterns(".kvbake"))
    (folder / "deploy.yaml").write_text(json.dumps({
        "format": 1, "start": "workers-first",
        "nodes": [{"name": "spark-a", "host": "ssh://ops@spark-a", "role": "head", "address": "10.0.0.11",
                   **({"launch": launch_a} if launch_a is not None else {})},
                  {"name": "spark-b", "host": "ssh://ops@spark-b", "role": "worker", "address": "10.0.0.12"}],
        "launcher": {"command": launcher or LAUNCH_VLLM, "container": "vllm-serve", "timeout_s": 60,
                     "env": env if env is not None else {"MODEL_DIR": "/models/dsv41", "SOURCE_ROOT": "/usr/local/lib/python3.11/dist-packages"}}}))
    return folder


def dry_run(capsys: pytest.CaptureFixture, folder: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["deploy", "--dry-run", "--preset", "control", "--image", IMAGE, "--manifest", str(folder / "manifest.yaml"),
                 "--deploy", str(folder / "deploy.yaml"), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_node_in_start_order_with_its_variables_and_calls(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = project(tmp_path, launch_a=SPARK_A)
    before = tree(folder)
    code, out, err = dry_run(capsys, folder, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["dry_run"] is True and [n["node"] for n in data["nodes"]] == ["spark-b", "spark-a"]
    head = data["nodes"][1]
    assert head["variables"]["DOCKER_HOST"] == "ssh://ops@spark-a" and head["variables"]["KVBAKE_ROLE"] == "head"
    assert json.loads(head["variables"]["KVBAKE_NODE_LAUNCH_JSON"])["devices"] == ["/dev/infiniband"]
    assert head["command"] == [*LAUNCH_VLLM, "--print"]
    call = head["calls"][0]
    assert call.startswith("docker run ") and "--device /dev/infiniband" in call and "--ulimit memlock=-1" in call
    assert "--restart no" in call and "--env NCCL_SOCKET_IFNAME=enp1s0f0np0" in call and "--shm-size 32g" in call
    assert "--device" not in data["nodes"][0]["calls"][0]
    assert tree(folder) == before and not (folder / ".kvbake" / "deploy").exists()


def test_the_text_names_every_node_and_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = project(tmp_path, env={"MODEL_DIR": "/models/dsv41", "SHAPE": "exec"})
    code, out, _ = dry_run(capsys, folder)
    assert code == 0
    assert out.splitlines()[0].endswith("nothing was changed")
    assert "spark-a (head, rank 0): " in out and "spark-b (worker, rank 1): " in out
    assert out.count("    docker exec --detach --env-file ") == 2


@pytest.mark.parametrize("launcher", [["/bin/false"], [sys.executable, str(ROOT / "scripts" / "standin_launcher.py")]])
def test_a_launcher_without_print_is_named_and_nothing_changes(launcher: list[str], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """/bin/false fails; the stand-in launcher ignores --print and tries to start a serve, on no engine."""
    folder = project(tmp_path, launcher=launcher)
    before = tree(folder)
    code, out, err = dry_run(capsys, folder)
    assert code == 12 and out == ""
    assert err.startswith("error (rollout): dry run: launcher on spark-b exited 1 with --print") and err.count("\n") == 1
    assert tree(folder) == before


def test_an_input_the_launcher_refuses_is_its_exit_and_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = project(tmp_path, env={"MODEL_DIR": "models/relative"})
    code, _, err = dry_run(capsys, folder)
    assert code == 12 and "exited 2 with --print (kvbake-launch-vllm: MODEL_DIR='models/relative' is not an absolute path" in err


@pytest.mark.parametrize(("launch", "named"), [
    ({"env": {"VLLM_DSV41_KV_PAIR": "3"}}, "nodes[spark-a].launch.env sets VLLM_DSV41_KV_PAIR, a switch of the manifest"),
    ({"cache_mounts": ["/srv/a:/usr/local/lib/python3.11"]}, "nodes[spark-a].launch.cache_mounts target /usr/local/lib/python3.11 overlaps"),
])
def test_what_only_the_manifest_knows_is_refused_before_any_launcher_runs(launch: dict, named: str, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture) -> None:
    folder = project(tmp_path, launcher=["/bin/false"], launch_a=launch)
    code, _, err = dry_run(capsys, folder)
    assert code == 3 and named in err


@pytest.mark.parametrize("extra", [["--resume"], ["--reseat", "spark-a"], ["--break-lock"]])
def test_a_dry_run_of_a_recovery_is_a_usage_error(extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = project(tmp_path)
    code, _, err = dry_run(capsys, folder, *extra)
    assert code == 2 and err.startswith("error (usage): deploy --dry-run takes --preset NAME")
