"""`config --check --deploy`: what every node serves, process by process, against the manifest's presets (fake fleet)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fake_fleet import CONTAINER, REPO, SOURCE_ROOT, World, deploy, make_world, release
from kvbake.cli import main
from kvbake.errors import RolloutError
from kvbake.manifest import load_manifest
from kvbake.serve.core.presets import preset_sha256
from kvbake.ship.adapters import fleet as fleet_module
from kvbake.ship.adapters.fleet import Fleet
from tests.unit.helpers_manifest import write_manifest

# The fake fleet's serves run --max-model-len 4096; `packing` sets the one switch.
SWITCH = "KVS_PACK"
MANIFEST = """\
format: 1
name: tiny
standin: true
base: {image: "kvbake-test/tiny:1", platform: native, source_root: /src}
donor: {url: "https://example.invalid/tiny.git", revision: "0123456789abcdef0123456789abcdef01234567"}
chain:
  - {id: "0001", file: patches/0001-tiny.patch, role: feature}
switches:
  KVS_PACK: {values: ["3", "9"]}
forbidden: {}
presets:
  control: {status: validated, max_model_len: 4096, switches: {}, note: "all off"}
  packing: {status: validated, max_model_len: 4096, switches: {KVS_PACK: "3"}, note: "packing"}
output: {repository: "127.0.0.1:5000/tiny", tag: "{base_tag}-kvpack-{short_id}"}
"""


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    w = make_world(tmp_path, monkeypatch)
    w.fleet = Fleet(w.fleet.deployment, w.engines, REPO, (SWITCH,), (f"{SOURCE_ROOT}/x.py",), SOURCE_ROOT)
    hosts = {node.host: w.engines[node.name] for node in w.fleet.deployment.nodes}
    monkeypatch.setattr(fleet_module, "Engine", lambda host: hosts[host])
    return w


def serve_by_hand(world: World, env: dict[str, list[str]] | None = None) -> None:
    """Each node serves the base without kvbake, with the packing switch set (or the env given for a node)."""
    for node, engine in world.engines.items():
        engine.run_serving(CONTAINER, "base:1", (env or {}).get(node, [f"{SWITCH}=3"]))


def deployed_packing(world: World, tmp_path: Path):
    """The packing preset deployed by kvbake, its release hashed as the manifest states it."""
    manifest = load_manifest(write_manifest(tmp_path / "project", MANIFEST))
    packing = dataclasses.replace(release("packing", {SWITCH: "3"}), runtime_sha256=preset_sha256(manifest, manifest.presets["packing"]))
    world.offer(packing, {"Env": []})
    deploy(world, packing)
    return packing


def check(world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *extra: str, manifest: str = MANIFEST) -> int:
    path = write_manifest(tmp_path / "project", manifest)
    return main(["config", "--check", *world.command_line(monkeypatch, manifest=path), *extra])


def test_serves_started_by_hand_match_the_preset_they_equal(world, monkeypatch, tmp_path, capsys) -> None:
    serve_by_hand(world)
    assert check(world, monkeypatch, tmp_path, "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"ok": True, "out": "configs", "nodes": {"a": "packing", "b": "packing"}}
    assert check(world, monkeypatch, tmp_path) == 0
    assert capsys.readouterr().out.strip() == "what runs matches the manifest: a serves preset packing, b serves preset packing"


def test_a_serve_that_equals_no_preset_is_named_with_the_nearest_and_its_differences(world, monkeypatch, tmp_path, capsys) -> None:
    serve_by_hand(world, {"b": [f"{SWITCH}=9"]})
    assert check(world, monkeypatch, tmp_path) == 7
    err = capsys.readouterr().err
    assert "b pid 1 is not preset " in err and "switches {'KVS_PACK': '9'}" in err
    assert "a pid" not in err


def test_a_node_whose_container_is_absent_or_stopped_runs_no_container(world, monkeypatch, tmp_path, capsys) -> None:
    serve_by_hand(world)
    del world.engines["a"].containers[CONTAINER]
    world.engines["b"].containers[CONTAINER]["State"] = {"Running": False}
    assert check(world, monkeypatch, tmp_path) == 7
    err = capsys.readouterr().err
    assert f"a runs no container {CONTAINER}" in err and f"b runs no container {CONTAINER}" in err


def test_a_release_kvbake_deployed_must_still_be_its_preset(world, monkeypatch, tmp_path, capsys) -> None:
    packing = deployed_packing(world, tmp_path)
    assert check(world, monkeypatch, tmp_path, "--json") == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == {"a": "packing", "b": "packing"}
    edited = MANIFEST.replace('switches: {KVS_PACK: "3"}, note: "packing"', 'switches: {KVS_PACK: "9"}, note: "packing"')
    assert check(world, monkeypatch, tmp_path, manifest=edited) == 7
    err = capsys.readouterr().err
    assert "a runs packing with switches {'KVS_PACK': '3'}, the manifest now says {'KVS_PACK': '9'}" in err
    assert "pid 1 is not preset packing" in err, "the deployed preset is the one compared, not the nearest"
    assert err.startswith("error (integrity): what runs drifts from the manifest's runtime settings: ")
    assert "fix: deploy --preset NAME to apply the manifest's settings" in err
    assert err.rstrip().endswith("or restore the preset in the manifest")
    assert "the manifest now says {'KVS_PACK': '9'}; a pid 1 is not preset packing" in err, "every problem, one after another"


def test_a_deployed_serve_that_another_preset_equals_is_not_its_preset(world, monkeypatch, tmp_path, capsys) -> None:
    packing = deployed_packing(world, tmp_path)
    world.engines["a"].run_serving(CONTAINER, packing.image, [])
    assert check(world, monkeypatch, tmp_path) == 7
    err = capsys.readouterr().err
    assert "a pid 1 is not preset packing: switches {} (the preset: {'KVS_PACK': '3'})" in err and "b pid" not in err


def test_a_release_hashed_otherwise_names_both_hashes_to_twelve_characters(tmp_path) -> None:
    from kvbake.serve.core.runtime_config import runtime_drift

    manifest = load_manifest(write_manifest(tmp_path / "project", MANIFEST))
    stale = dataclasses.replace(release("packing", {SWITCH: "3"}, ()), runtime_sha256="f" * 64)
    stale = dataclasses.replace(stale, max_model_len=4096)
    (problem,) = runtime_drift(manifest, "a", stale, None)
    now = preset_sha256(manifest, manifest.presets["packing"])
    assert f"(preset sha256 {'f' * 12}), the manifest's preset now hashes {now[:12]} (status," in problem


def with_node_containers(options: list[str], name: str) -> list[str]:
    """The deployment file of `options` with every node's own serve (nodes[].container) named `name`."""
    path = Path(options[options.index("--deploy") + 1])
    document = json.loads(path.read_text())
    for node in document["nodes"]:
        node["container"] = name
    path.write_text(json.dumps(document))
    return options


def test_a_serve_kvbake_did_not_deploy_is_read_from_the_nodes_own_container(world, monkeypatch, tmp_path, capsys) -> None:
    for engine in world.engines.values():
        engine.run_serving("hand-serve", "base:1", [f"{SWITCH}=3"])
    options = with_node_containers(world.command_line(monkeypatch, manifest=write_manifest(tmp_path / "project", MANIFEST)), "hand-serve")
    assert main(["config", "--check", *options, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == {"a": "packing", "b": "packing"}


def test_a_release_kvbake_deployed_is_read_from_the_launchers_container(world, monkeypatch, tmp_path, capsys) -> None:
    deployed_packing(world, tmp_path)
    options = with_node_containers(world.command_line(monkeypatch, manifest=tmp_path / "project" / "manifest.yaml"), "hand-serve")
    assert main(["config", "--check", *options, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == {"a": "packing", "b": "packing"}


def test_a_node_whose_records_are_damaged_is_named(world, monkeypatch, tmp_path, capsys) -> None:
    deployed_packing(world, tmp_path)
    world.engines["b"].files["kvbake-state"] = {"/kvbake/state-a.json": b"{", "/kvbake/state-b.json": b""}
    options = world.command_line(monkeypatch, manifest=tmp_path / "project" / "manifest.yaml")
    assert main(["config", "--check", *options]) == RolloutError.exit_code
    assert "node b: every copy of its state record is corrupt" in capsys.readouterr().err


def test_an_adopted_serve_is_read_from_the_nodes_own_container_and_matched_against_every_preset(world, monkeypatch, tmp_path, capsys) -> None:
    from kvbake.ship.adapters.adoption import adopt

    for engine in world.engines.values():
        engine.run_serving("hand-serve", "base:1", [f"{SWITCH}=3"])
    adopted = adopt(world.fleet, "the serve before kvbake", False, "hand-serve")
    assert all(r.adopted is not None for r in adopted.values())
    options = with_node_containers(world.command_line(monkeypatch, manifest=write_manifest(tmp_path / "project", MANIFEST)), "hand-serve")
    assert main(["config", "--check", *options, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == {"a": "packing", "b": "packing"}
