"""`validate` on the command line: the options reach the plan, and --rollback-on-failure rolls a fake fleet back on a stop."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fake_fleet import CONTROL, OTHER, World, deploy, make_world
from kvbake.cli import main
from kvbake.operate.adapters import validation_run
from tests.doubles.openai_double import Fault, Misbehaviour, OpenAIDouble

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
MEMINFO = "MemAvailable:    8388608 kB\n"
SMALL = ["--depths", "1000,3000", "--prefix-tokens", "2000", "--corruption-tokens", "2000", "--mem-interval", "0"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "standin"
    shutil.copytree(STANDIN, root, ignore=shutil.ignore_patterns(".kvbake"))
    return root


def reports(project: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((project / ".kvbake" / "validate").glob("*.json"))]


def test_the_options_given_reach_the_plan_and_the_report_is_named(project: Path, capsys) -> None:
    with OpenAIDouble(model="tiny-model") as double:
        code = main(["validate", "--manifest", str(project / "manifest.yaml"), "--preset", "control", "--endpoint", double.url,
                     "--model", "tiny-model", "--seed", "other-seed", "--pressure", "2", "--pressure-tokens", "2500",
                     "--mem-floor", "0.25", *SMALL])
        counts, received = double.counts, double.received
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert counts["models"] == 0, "the model given is used, not asked for"
    assert {body["model"] for body in received} == {"tiny-model"}
    (report,) = reports(project)
    assert (report["preset"], report["model"], report["endpoint"]) == ("control", "tiny-model", double.url)
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["pressure"]["ran"] and steps["pressure"]["data"]["requests"] == 2
    assert steps["pressure"]["data"]["prompt_tokens"][-1] >= 2500
    assert report["memory"]["floor_bytes"] == 1024 ** 3 // 4
    path = sorted((project / ".kvbake" / "validate").glob("*.json"))[0]
    assert out.rstrip().endswith(f"report:   .kvbake/validate/{path.name} (and .txt)")


def test_the_seed_changes_the_needle_codes(project: Path, capsys) -> None:
    sent = []
    for seed in ("kvbake", "another"):
        with OpenAIDouble() as double:
            assert main(["validate", "--manifest", str(project / "manifest.yaml"), "--preset", "control", "--endpoint", double.url,
                         "--seed", seed, "--json", *SMALL]) == 0
            sent.append([body["prompt"] for body in double.received])
        capsys.readouterr()
    assert sent[0][0] == sent[1][0], "the inertness prompt is the shared corpus"
    assert sent[0][-1] != sent[1][-1], "the needle prompt's codes come from the seed"


def test_the_json_names_the_report_relative_to_the_project(project: Path, capsys) -> None:
    with OpenAIDouble() as double:
        assert main(["validate", "--manifest", str(project / "manifest.yaml"), "--preset", "control", "--endpoint", double.url,
                     "--json", *SMALL]) == 0
    data = json.loads(capsys.readouterr().out)
    path = sorted((project / ".kvbake" / "validate").glob("*.json"))[0]
    assert data["report"] == f".kvbake/validate/{path.name}" and data["outcome"] == "passed"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """Two fake nodes that served OTHER, then CONTROL; validate reads their records and MemAvailable through them."""
    w = make_world(tmp_path, monkeypatch)
    deploy(w, OTHER)
    deploy(w, CONTROL)
    hosts = {node.host: w.engines[node.name] for node in w.fleet.deployment.nodes}
    for engine in w.engines.values():
        engine.exec_in = lambda container, argv: MEMINFO
    monkeypatch.setattr(validation_run, "Engine", lambda host: hosts[host])
    return w


def test_a_stop_with_rollback_on_failure_rolls_every_rank_back(project: Path, world: World, monkeypatch, capsys) -> None:
    options = world.command_line(monkeypatch, manifest=project / "manifest.yaml")
    broken = Misbehaviour(faults=(Fault("status", 503, kind="models"),))
    with OpenAIDouble(faults=broken) as double:
        code = main(["validate", *options, "--preset", "control", "--endpoint", double.url, "--rollback-on-failure", *SMALL])
    assert code == 15
    (report,) = reports(project)
    assert report["rollback"].startswith("done: rolled back every rank to release ")
    assert {n["records"][0] for n in world.snapshot()["nodes"].values()} == {OTHER.id}
    assert "/v1/models answered HTTP 503" in capsys.readouterr().err


def test_a_passing_run_with_rollback_on_failure_changes_nothing(project: Path, world: World, monkeypatch, capsys) -> None:
    options = world.command_line(monkeypatch, manifest=project / "manifest.yaml")
    before = world.snapshot()
    with OpenAIDouble() as double:
        assert main(["validate", *options, "--preset", "control", "--endpoint", double.url, "--rollback-on-failure", *SMALL]) == 0
    assert world.snapshot() == before
    (report,) = reports(project)
    assert report["rollback"] == "not needed"
    assert report["release"]["id"] == CONTROL.id
    assert report["memory"]["watched"] and report["memory"]["lowest_bytes"] == {"a": 8 * 1024 ** 3, "b": 8 * 1024 ** 3}
