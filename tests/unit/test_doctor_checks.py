"""`doctor` with fake engines: a node's MemAvailable or free disk below its floor, and the free disk of the manifest's
folder (where kvbake writes) below the floor, are each one FAIL line with its fix; the run's exit code is the first's."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kvbake import cli
from kvbake.operate import commands
from kvbake.operate.adapters import doctor
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.operate.adapters.memwatch import GIB
from kvbake.engines.core.detection import EngineProfile

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
DEPLOY = """\
format: 1
nodes:
  - {name: spark-a, host: "unix:///run/spark-a.sock", role: head}
  - {name: spark-b, host: "unix:///run/spark-b.sock", role: worker}
launcher:
  command: ["/opt/serve/launch.sh"]
  container: vllm-serve
  timeout_s: 600
lock_stale_after_s: 900
"""
ROOT = "/var/lib/docker"


class FakeEngine:
    """An engine that answers, holds the locked base, and whose probe container reads the given memory and disk."""

    def __init__(self, label: str, base_config: str, mem_available: int = 8 * GIB, free: int = 100 * GIB) -> None:
        self.label, self.base_config, self.mem_available, self.free = label, base_config, mem_available, free
        self.client = SimpleNamespace(system=SimpleNamespace(info=lambda: SimpleNamespace(docker_root_dir=ROOT)))
        self.probes: list[Any] = []

    def ping(self) -> dict[str, Any]:
        return {"architecture": "aarch64"}

    def profile(self) -> EngineProfile:
        return EngineProfile("26.1.5", "classic", "overlay2")

    def inspect_image(self, reference: str) -> dict[str, Any]:
        return {"Id": self.base_config}

    def config_digest_of(self, inspect: dict[str, Any], reference: str) -> str:
        return str(inspect["Id"])

    interfaces = ("enp1s0f0np0", "enP2p1s0f1np1", "lo", "wlP9s9")

    def run_probe(self, image: str, argv: list[str], mounts: dict[str, str], network: str = "none") -> str:
        self.probes.append((image, argv, mounts, network))
        if argv[-1] == "/sys/class/net":
            return "".join(f"{name}\n" for name in self.interfaces)
        return f"MemAvailable:   {self.mem_available // 1024} kB\n{self.free}\n"


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The stand-in with a deployment file, fake engines here and on both nodes, a fake registry line, and a disk
    whose free space is per measured folder (the manifest's folder by default has plenty)."""
    root = tmp_path / "standin"
    shutil.copytree(STANDIN, root, ignore=shutil.ignore_patterns(".kvbake"))
    (root / "deploy.yaml").write_text(DEPLOY)
    config = read_lock(load_manifest(root / "manifest.yaml")).base.config_digest
    nodes = {"unix:///run/spark-a.sock": FakeEngine("spark-a", config), "unix:///run/spark-b.sock": FakeEngine("spark-b", config)}
    free = {root: 500 * GIB}
    measured: list[Path] = []

    def disk_usage(path: Path) -> Any:
        measured.append(Path(path))
        return SimpleNamespace(total=1000 * GIB, used=0, free=free.get(Path(path), 1))

    monkeypatch.setattr(commands, "Engine", lambda host=None: FakeEngine("local engine", config))
    monkeypatch.setattr(doctor, "Engine", lambda host: nodes[host])
    monkeypatch.setattr(doctor, "registry_line", lambda engine, manifest, registry: "127.0.0.1:5000 over TLS, logged in as ops")
    monkeypatch.setattr(doctor.shutil, "disk_usage", disk_usage)
    return SimpleNamespace(root=root, nodes=nodes, free=free, measured=measured)


def run_doctor(project: SimpleNamespace, capsys: pytest.CaptureFixture) -> tuple[int, list[str], str]:
    code = cli.main(["doctor", "--manifest", str(project.root / "manifest.yaml"), "--deploy", str(project.root / "deploy.yaml")])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_every_check_passes_and_the_free_disk_here_is_the_manifest_folders(project, capsys):
    code, lines, err = run_doctor(project, capsys)
    assert (code, err) == (0, "")
    assert project.measured == [project.root], "the manifest's folder, where kvbake writes, not the home folder"
    assert lines[2] == f"ok    free disk (here)       {project.root}: 500.00 GiB free"
    assert lines[-1] == f"ok    memory, disk spark-b   spark-b: MemAvailable 8.00 GiB, 100.00 GiB free under {ROOT}"
    assert len(lines) == 9


def summary(kind: str, total: int, first: str) -> str:
    """The run's error line: a count and a pointer at the FAIL lines, never a repeat of one."""
    return (f"error ({kind}): doctor: 1 of {total} checks failed (the FAIL lines above); the first, {first}, gives the exit code; "
            "fix: do what each FAIL line's fix says, then run doctor again\n")


def test_memavailable_below_the_floor_fails_that_node(project, capsys):
    project.nodes["unix:///run/spark-b.sock"].mem_available = GIB
    code, lines, err = run_doctor(project, capsys)
    fix = "stop what else runs on that node before a supervised window"
    assert code == 10
    assert lines[-1] == f"FAIL  memory, disk spark-b   spark-b: MemAvailable 1.00 GiB is below the floor 1.50 GiB; fix: {fix}"
    assert err == summary("resource", 9, "memory, disk spark-b")


def test_a_nodes_free_disk_below_the_floor_fails_that_node(project, capsys):
    project.nodes["unix:///run/spark-a.sock"].free = 10 * GIB
    code, lines, err = run_doctor(project, capsys)
    assert code == 10
    assert lines[5] == f"FAIL  memory, disk spark-a   spark-a: 10.00 GiB free under {ROOT}, below 20.00 GiB; fix: free disk space on that node"
    assert err == summary("resource", 9, "memory, disk spark-a")


def test_the_manifest_folders_free_disk_below_the_floor_fails_here(project, capsys):
    project.free[project.root] = 5 * GIB
    code, lines, err = run_doctor(project, capsys)
    fix = "free disk space there before a lock or build"
    assert code == 10
    assert lines[2] == f"FAIL  free disk (here)       {project.root}: 5.00 GiB free, below 20.00 GiB; fix: {fix}"
    assert err == summary("resource", 9, "free disk (here)")


def test_the_floors_are_the_ones_given(project, capsys):
    project.nodes["unix:///run/spark-b.sock"].mem_available = GIB
    project.nodes["unix:///run/spark-a.sock"].free = 10 * GIB
    argv = ["doctor", "--manifest", str(project.root / "manifest.yaml"), "--deploy", str(project.root / "deploy.yaml"),
            "--mem-floor", "0.5", "--disk-floor", "5"]
    assert cli.main(argv) == 0, capsys.readouterr()


def test_a_node_whose_base_is_another_image_fails_its_base_line_and_skips_its_memory_line(project, capsys):
    locked = read_lock(load_manifest(project.root / "manifest.yaml")).base.config_digest
    other = "sha256:" + "0" * 64
    project.nodes["unix:///run/spark-b.sock"].base_config = other
    code, lines, err = run_doctor(project, capsys)
    name = load_manifest(project.root / "manifest.yaml").base.node_name
    line = f"spark-b: {name} is config {other[:19]}, the lock pins {locked[:19]}; fix: run python build.py base sync (--force moves the tag)"
    assert code == 6
    assert lines[-1] == f"FAIL  base on spark-b        {line}"
    assert err == summary("base image", 8, "base on spark-b")
    assert project.nodes["unix:///run/spark-b.sock"].probes == [], "no memory probe on a node without the base"


def with_launch(project: SimpleNamespace, env_b: dict[str, str]) -> None:
    import json

    launch = "{env: " + json.dumps(env_b) + "}"
    text = DEPLOY.replace("role: worker}", "role: worker, launch: " + launch + "}")
    (project.root / "deploy.yaml").write_text(text)


@pytest.mark.parametrize("env", [{"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f0np0"},
                                 {"NCCL_SOCKET_IFNAME": "enp1"}, {"NCCL_SOCKET_IFNAME": "=enp1s0f0np0,lo"},
                                 {"NCCL_SOCKET_IFNAME": "^docker0"}])
def test_interfaces_the_node_has_pass_read_on_its_host_network(project, capsys, env):
    with_launch(project, env)
    code, lines, err = run_doctor(project, capsys)
    assert (code, err) == (0, "")
    probe = project.nodes["unix:///run/spark-b.sock"].probes[-1]
    assert probe[1] == ["ls", "-1", "/sys/class/net"] and probe[3] == "host"
    assert lines[-1].startswith("ok    interfaces spark-b")
    assert all(p[3] == "none" for p in project.nodes["unix:///run/spark-a.sock"].probes), "spark-a names no interface"


@pytest.mark.parametrize(("env", "variable", "missing"), [
    ({"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "eth0"}, "GLOO_SOCKET_IFNAME", "eth0"),
    ({"NCCL_SOCKET_IFNAME": "ib0,enp1s0f0np0"}, "NCCL_SOCKET_IFNAME", "ib0"),
    ({"NCCL_SOCKET_IFNAME": "=enp1"}, "NCCL_SOCKET_IFNAME", "enp1"),
    ({"GLOO_SOCKET_IFNAME": "enp1"}, "GLOO_SOCKET_IFNAME", "enp1"),
])
def test_a_missing_interface_fails_naming_node_variable_interface_and_what_the_node_has(project, capsys, env, variable, missing):
    with_launch(project, env)
    code, lines, err = run_doctor(project, capsys)
    assert code == 3
    fail = lines[-1]
    assert fail.startswith("FAIL  interfaces spark-b") and f"{variable}={missing} names no interface of the node" in fail
    assert "(it has enP2p1s0f1np1, enp1s0f0np0, lo, wlP9s9)" in fail and "nodes[spark-b].launch.env" in fail
    assert err.startswith("error (manifest): doctor: 1 of 10 checks failed")


def test_a_switch_in_a_nodes_env_is_refused_before_any_engine_call(project, capsys):
    with_launch(project, {"VLLM_DSV41_KV_PAIR": "3"})
    code, lines, err = run_doctor(project, capsys)
    assert code == 3 and lines == [] and "nodes[spark-b].launch.env sets VLLM_DSV41_KV_PAIR, a switch of the manifest" in err
    assert all(engine.probes == [] for engine in project.nodes.values())
