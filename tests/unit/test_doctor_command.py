"""`doctor` on the command line over fake engines: its JSON, the options it passes on, and a project without a lock
or a deployment file."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from kvbake import cli
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.operate import commands
from kvbake.operate.adapters import doctor
from kvbake.operate.adapters.memwatch import GIB
from tests.unit.test_doctor_checks import DEPLOY, FakeEngine, project  # noqa: F401 - the fixture by name


@pytest.fixture
def seen(project: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:  # noqa: F811 - the fixture above
    """The host the local engine was made for and the registry the registry check was given."""
    calls = SimpleNamespace(hosts=[], registries=[])
    config = read_lock(load_manifest(project.root / "manifest.yaml")).base.config_digest

    def local(host: Any = None) -> FakeEngine:
        calls.hosts.append(host)
        return FakeEngine("local engine", config)

    def registry_line(engine: Any, manifest: Any, registry: str | None) -> str:
        calls.registries.append(registry)
        return "127.0.0.1:5000 over TLS, logged in as ops"

    monkeypatch.setattr(commands, "Engine", local)
    monkeypatch.setattr(doctor, "registry_line", registry_line)
    return calls


def doctor_argv(project: SimpleNamespace, *extra: str, deploy: bool = True) -> list[str]:
    argv = ["doctor", "--manifest", str(project.root / "manifest.yaml"), *extra]
    return [*argv, "--deploy", str(project.root / "deploy.yaml")] if deploy else argv


def test_the_json_lists_every_check_with_its_verdict_and_what_was_seen(project, seen, capsys) -> None:
    assert cli.main(doctor_argv(project, "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and len(data["checks"]) == 9
    assert data["checks"][1] == {"check": "registry", "verdict": "ok", "seen": "127.0.0.1:5000 over TLS, logged in as ops"}
    assert {tuple(sorted(c)) for c in data["checks"]} == {("check", "seen", "verdict")}


def test_a_failing_doctor_prints_its_json_with_ok_false_before_the_error(project, seen, capsys) -> None:
    project.nodes["unix:///run/spark-b.sock"].mem_available = GIB
    assert cli.main(doctor_argv(project, "--json")) == 10
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["ok"] is False and data["checks"][-1]["verdict"] == "FAIL" and data["checks"][-1]["check"] == "memory, disk spark-b"
    assert err.startswith("error (resource): doctor: 1 of 9 checks failed")


def test_the_host_and_the_registry_given_are_the_ones_used(project, seen, capsys) -> None:
    assert cli.main(doctor_argv(project, "--host", "unix:///run/local.sock", "--registry", "10.0.0.9:5000")) == 0
    assert seen.hosts == ["unix:///run/local.sock"] and seen.registries == ["10.0.0.9:5000"]


def test_without_a_deployment_only_this_host_is_checked(project, seen, capsys) -> None:
    assert cli.main(doctor_argv(project, "--json", deploy=False)) == 0
    assert [c["check"] for c in json.loads(capsys.readouterr().out)["checks"]] == ["engine", "registry", "free disk (here)"]
    assert all(engine.probes == [] for engine in project.nodes.values())


def test_an_unlocked_project_checks_the_nodes_base_without_a_pinned_config(project, seen, capsys) -> None:
    (project.root / "manifest.lock.json").unlink()
    for engine in project.nodes.values():
        engine.base_config = "sha256:" + "5" * 64
    assert cli.main(doctor_argv(project, "--json")) == 0
    checks = json.loads(capsys.readouterr().out)["checks"]
    assert [c["verdict"] for c in checks if c["check"].startswith("base on ")] == ["ok", "ok"]


def test_a_cache_mount_over_the_locked_source_root_is_refused_before_any_engine_call(project, seen, capsys) -> None:
    root = read_lock(load_manifest(project.root / "manifest.yaml")).source_root
    above = root.rsplit("/", 2)[0]  # a folder above the sources: only the lock's source root tells it apart
    launch = '{cache_mounts: ["/srv/cache:' + above + '"]}'
    (project.root / "deploy.yaml").write_text(DEPLOY.replace("role: worker}", "role: worker, launch: " + launch + "}"))
    assert cli.main(doctor_argv(project)) == 3
    assert f"overlaps the image's Python sources ({root})" in capsys.readouterr().err
    assert seen.hosts == [] and all(engine.probes == [] for engine in project.nodes.values())
