"""validate's run around the plan: the head's release record, a preset the head does not run, a failing rollback, the
corpus label, the memory summary and report names that are already taken (test double and fake nodes)."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fake_fleet import CONTROL, World, deploy, make_world
from kvbake.deployfile import Deployment, Launcher, Node
from kvbake.errors import RolloutError, ValidationStop
from kvbake.manifest import Manifest, load_manifest
from kvbake.operate.adapters import validation_run
from kvbake.operate.adapters.validation_run import ValidateRequest, release_of, run_validation, write_report
from kvbake.serve.core.presets import choose_preset
from tests.doubles import write_tiny_corpus
from tests.doubles.openai_double import Fault, Misbehaviour, OpenAIDouble

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin" / "manifest.yaml"
MEMINFO = "MemAvailable:    8388608 kB\n"


@pytest.fixture
def manifest(tmp_path: Path) -> Manifest:
    """The stand-in manifest, placed in a private folder so the reports land there."""
    return dataclasses.replace(load_manifest(STANDIN), path=tmp_path / "manifest.yaml")


def request(manifest: Manifest, url: str, preset: str = "control", **fields) -> ValidateRequest:
    return ValidateRequest(manifest, choose_preset(manifest, preset), url, depths=(1000, 3000), prefix_tokens=2000,
                           corruption_tokens=2000, mem_interval_s=0, **fields)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """Two fake nodes; validate reaches them (records, MemAvailable) through validation_run's Engine."""
    w = make_world(tmp_path, monkeypatch)
    hosts = {node.host: w.engines[node.name] for node in w.fleet.deployment.nodes}
    for engine in w.engines.values():
        engine.exec_in = lambda container, argv: MEMINFO
    monkeypatch.setattr(validation_run, "Engine", lambda host: hosts[host])
    return w


def nodes(world: World, *order: tuple[str, str]) -> Deployment:
    """The world's nodes as a deployment that lists them in `order` as (name, role)."""
    return Deployment(world.fleet.deployment.path, tuple(Node(n, f"unix:///{n}", role) for n, role in order),
                      Launcher(("launch",), "serve", 10), 900)


def test_without_a_deployment_there_is_no_release_record() -> None:
    assert release_of(None) == {"id": None, "text": "no release record (no --deploy given)"}


def test_a_head_without_a_release_record_is_named(world: World) -> None:
    assert release_of(nodes(world, ("a", "head"), ("b", "worker"))) == {"id": None, "node": "a", "text": "no release record on a"}


def test_the_release_record_is_the_head_nodes_wherever_it_is_listed(world: World) -> None:
    deploy(world, CONTROL)
    world.engines["b"].containers.pop("kvbake-state", None)
    found = release_of(nodes(world, ("b", "worker"), ("a", "head")))
    assert (found["id"], found["node"], found["preset"], found["image"]) == (CONTROL.id, "a", "control", CONTROL.image)
    assert (found["switches"], found["max_model_len"]) == ({}, CONTROL.max_model_len)
    assert found["text"] == f"release {CONTROL.id} (control) on a"
    assert release_of(nodes(world, ("b", "worker"), ("a", "worker")))["node"] == "b", "no head: the first node"


def test_a_preset_the_head_does_not_run_is_refused_before_any_request(world: World, manifest: Manifest) -> None:
    deploy(world, CONTROL)
    with OpenAIDouble() as double:
        with pytest.raises(ValidationStop) as caught:
            run_validation(request(manifest, double.url, "packing-327680", deployment=nodes(world, ("a", "head"), ("b", "worker"))))
        assert double.counts == {"completion": 0, "tokenize": 0, "models": 0}
    message = caught.value.message
    assert message.startswith(f"a runs release {CONTROL.id} with preset control, not packing-327680")
    assert caught.value.fix.startswith("validate --preset control, or deploy packing-327680 first")
    assert not (manifest.root / ".kvbake" / "validate").exists()


def test_the_preset_the_head_runs_is_validated_with_every_node_watched(world: World, manifest: Manifest) -> None:
    deploy(world, CONTROL)
    with OpenAIDouble() as double:
        report, path = run_validation(request(manifest, double.url, deployment=nodes(world, ("a", "head"), ("b", "worker"))))
    data = json.loads(path.read_text())
    assert data["release"]["id"] == CONTROL.id and data["memory"]["watched"] is True
    assert data["memory"]["lowest_bytes"] == {"a": 8 * 1024 ** 3, "b": 8 * 1024 ** 3} and data["memory"]["samples"] == 8
    page = ET.fromstring(path.with_suffix(".html").read_text())
    lines = page.findall(".//{http://www.w3.org/2000/svg}polyline")
    assert [len(line.get("points").split()) for line in lines] == [8, 8], "a line per node, a point per sample"


def test_without_a_deployment_memory_is_not_watched(manifest: Manifest) -> None:
    with OpenAIDouble() as double:
        _, path = run_validation(request(manifest, double.url, mem_floor_gib=2.0))
    memory = json.loads(path.read_text())["memory"]
    assert memory == {"watched": False, "floor_bytes": 2 * 1024 ** 3, "samples": 8, "lowest_bytes": {}}


def test_a_rollback_that_fails_raises_its_own_error_naming_the_stop_and_the_report(manifest: Manifest) -> None:
    def rollback() -> str:
        raise RolloutError("node b is unreachable", "bring node b back")

    broken = Misbehaviour(faults=(Fault("status", 503, kind="models"),))
    with OpenAIDouble(faults=broken) as double, pytest.raises(RolloutError) as caught:
        run_validation(request(manifest, double.url), rollback)
    message = caught.value.message
    assert message.startswith("validation stopped (inertness: ") and "and the rollback failed: node b is unreachable; report " in message
    assert "bring node b back" in caught.value.fix, "the rollback's own fix"
    (path,) = (manifest.root / ".kvbake" / "validate").glob("*.json")
    assert json.loads(path.read_text())["rollback"] == "failed: node b is unreachable; fix: bring node b back"
    assert message.endswith(f"report .kvbake/validate/{path.stem}.txt")


def test_a_rollback_that_succeeds_is_recorded_and_the_stop_still_raised(manifest: Manifest) -> None:
    broken = Misbehaviour(faults=(Fault("status", 503, kind="models"),))
    with OpenAIDouble(faults=broken) as double, pytest.raises(ValidationStop):
        run_validation(request(manifest, double.url), lambda: "rolled back to r1")
    (path,) = (manifest.root / ".kvbake" / "validate").glob("*.json")
    assert json.loads(path.read_text())["rollback"] == "done: rolled back to r1"


def test_a_corpus_folder_is_named_with_its_record_count(manifest: Manifest, tmp_path: Path) -> None:
    folder = write_tiny_corpus(tmp_path / "my-corpus")
    with OpenAIDouble() as double:
        _, path = run_validation(request(manifest, double.url, corpus_dir=folder))
    assert json.loads(path.read_text())["corpus"] == "my-corpus: 12 records"


def test_a_report_name_already_taken_gets_the_next_number(manifest: Manifest) -> None:
    with OpenAIDouble() as double:
        report, path = run_validation(request(manifest, double.url))
    again, third = write_report(path.parent, report), write_report(path.parent, report)
    assert (again.name, third.name) == (f"{report.name}-2.json", f"{report.name}-3.json")
    assert again.with_suffix(".txt").is_file() and json.loads(again.read_text()) == json.loads(path.read_text())
    assert again.with_suffix(".html").read_text() == path.with_suffix(".html").read_text()
