"""The operate commands' wiring: each option reaches the check it feeds, in the order the command runs them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fake_engine import serve_process
from fake_fleet import CONTAINER, World
from kvbake.cli import main
from kvbake.errors import IntegrityError, PresetError, RolloutError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.operate.commands import _serve_against_presets
from kvbake.serve.core.serve_reading import read_serve
from kvbake.ship.adapters import fleet as fleet_module
from message_words import says
from test_config_check_running import MANIFEST, SWITCH, check, serve_by_hand
from test_config_check_running import world as fleet_world  # noqa: F401 (a fixture)
from test_node_locks import lock_of, no_note
from test_validate_command_rollback import MEMINFO, SMALL, project, reports  # noqa: F401 (project is a fixture)
from test_validate_command_rollback import world  # noqa: F401 (a fixture)
from tests.doubles.openai_double import Fault, Misbehaviour, OpenAIDouble
from tests.unit.helpers_manifest import write_manifest

TOKEN = "ghp_" + "A1b2C3d4E5" * 3 + "f6G7h8"
BAD_REASON = "first line\x07second"


def validate(project: Path, *argv: str) -> int:
    return main(["validate", "--manifest", str(project / "manifest.yaml"), *argv])


def config(project: Path, *argv: str) -> int:
    return main(["config", *argv, "--manifest", str(project / "manifest.yaml")])


# -- the checks that run before the manifest is read -----------------------------------------------------------------

def test_validate_refuses_a_bad_reason_before_reading_the_manifest(tmp_path: Path, capsys) -> None:
    code = validate(tmp_path, "--preset", "control", "--endpoint", "http://127.0.0.1:9", "--reason", BAD_REASON)
    assert code == PresetError.exit_code
    assert says(capsys.readouterr().err, "--reason")


def test_config_all_refuses_a_bad_reason(project: Path, capsys) -> None:
    assert config(project, "--all", "--out", str(project / "out"), "--reason", BAD_REASON) == PresetError.exit_code
    assert says(capsys.readouterr().err, "--reason")
    assert not (project / "out").exists()


@pytest.mark.parametrize("option", ["--endpoint", "--model"])
def test_validate_refuses_a_credential_before_reading_the_manifest(tmp_path: Path, option: str, capsys) -> None:
    given = {"--endpoint": "http://127.0.0.1:9", "--model": "m", option: TOKEN}
    code = validate(tmp_path, "--preset", "control", "--endpoint", given["--endpoint"], "--model", given["--model"])
    assert code == IntegrityError.exit_code
    assert says(capsys.readouterr().err, option)


# -- a held or untested preset: the overriding option and the reason reach choose_preset -----------------------------

@pytest.mark.parametrize(("preset", "option"), [("longctx-524288", "--allow-held"), ("longctx-1048576", "--allow-untested")])
def test_validate_runs_a_held_or_untested_preset_with_its_option_and_a_reason(project: Path, preset: str, option: str, capsys) -> None:
    status = load_manifest(project / "manifest.yaml").presets[preset].status
    assert option == f"--allow-{status}"
    with OpenAIDouble() as double:
        assert validate(project, "--preset", preset, "--endpoint", double.url, option, "--reason", "window 7", *SMALL) == 0
    (report,) = reports(project)
    assert report["preset"] == preset


@pytest.mark.parametrize(("preset", "option"), [("longctx-524288", "--allow-held"), ("longctx-1048576", "--allow-untested")])
def test_config_writes_a_held_or_untested_preset_with_its_option_and_a_reason(project: Path, preset: str, option: str, capsys) -> None:
    assert config(project, preset, "--out", str(project / "out"), option, "--reason", "window 7", "--json") == 0
    assert json.loads(capsys.readouterr().out)["presets"] == [preset]


# -- validate: sizes and paths reach the plan ------------------------------------------------------------------------

def test_validate_pressure_prompts_are_as_long_as_pressure_tokens_says(project: Path, capsys) -> None:
    with OpenAIDouble() as double:
        assert validate(project, "--preset", "control", "--endpoint", double.url, "--pressure", "2",
                        "--pressure-tokens", "1200", *SMALL) == 0
    (report,) = reports(project)
    steps = {s["name"]: s for s in report["steps"]}
    assert all(1200 <= tokens < 2000 for tokens in steps["pressure"]["data"]["prompt_tokens"])


def test_validate_reads_memory_from_the_meminfo_path_given(project: Path, world: World, monkeypatch, capsys) -> None:
    asked = []
    for engine in world.engines.values():
        engine.exec_in = lambda container, argv: asked.append(tuple(argv)) or MEMINFO
    options = world.command_line(monkeypatch, manifest=project / "manifest.yaml")
    with OpenAIDouble() as double:
        assert validate(project, *options[2:], "--preset", "control", "--endpoint", double.url,
                        "--meminfo-path", "/host/meminfo", *SMALL) == 0
    assert asked and all("/host/meminfo" in argv for argv in asked)


def test_validate_rollback_builds_the_fleet_from_the_manifest_and_its_lock(project: Path, world: World, monkeypatch, capsys) -> None:
    options = world.command_line(monkeypatch, manifest=project / "manifest.yaml")
    built = []
    monkeypatch.setattr(fleet_module, "make_fleet",
                        lambda deployment, manifest, lock: built.append((manifest, lock)) or world.fleet_of(deployment))
    broken = Misbehaviour(faults=(Fault("status", 503, kind="models"),))
    with OpenAIDouble(faults=broken) as double:
        assert validate(project, *options[2:], "--preset", "control", "--endpoint", double.url, "--rollback-on-failure", *SMALL) == 15
    manifest = load_manifest(project / "manifest.yaml")
    ((given_manifest, given_lock),) = built
    assert given_manifest.path == manifest.path and list(given_manifest.presets) == list(manifest.presets)
    assert given_lock.core_sha256() == read_lock(manifest).core_sha256()


def test_validate_rollback_does_not_break_a_stale_lock(project: Path, world: World, monkeypatch, capsys) -> None:
    options = world.command_line(monkeypatch, manifest=project / "manifest.yaml")
    lock_of(world, "a").acquire("base:1", "deploy-other", False, no_note)
    world.advance(10 * world.fleet.deployment.lock_stale_after_s)
    before = world.snapshot()["nodes"]
    broken = Misbehaviour(faults=(Fault("status", 503, kind="models"),))
    with OpenAIDouble(faults=broken) as double:
        code = validate(project, *options[2:], "--preset", "control", "--endpoint", double.url, "--rollback-on-failure", *SMALL)
    assert code == RolloutError.exit_code
    assert says(capsys.readouterr().err, "--break-lock")
    (report,) = reports(project)
    assert not report["rollback"].startswith("done")
    assert {n: s["records"] for n, s in world.snapshot()["nodes"].items()} == {n: s["records"] for n, s in before.items()}


# -- config --check ---------------------------------------------------------------------------------------------------

def test_config_check_of_an_empty_folder_in_a_locked_project_says_to_write_it(project: Path, capsys) -> None:
    shutil.rmtree(project / "configs")
    (project / "configs").mkdir()
    assert config(project, "--check") == IntegrityError.exit_code
    err = capsys.readouterr().err
    assert says(err, "config --all first") and not says(err, "unlocked")


def test_config_check_with_deploy_prints_the_folder_and_the_nodes_on_lines_of_their_own(fleet_world: World, monkeypatch, tmp_path: Path,
                                                                                      capsys) -> None:
    serve_by_hand(fleet_world)
    path = write_manifest(tmp_path / "project", MANIFEST)
    assert main(["config", "--all", "--manifest", str(path)]) == 0
    capsys.readouterr()
    assert check(fleet_world, monkeypatch, tmp_path) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("configs: ") and lines[1].startswith("what runs matches the manifest: ")


# -- one container's serves against the presets ----------------------------------------------------------------------

def reading_of(world: World):
    """What node a's serving container runs, process by process."""
    return read_serve(world.engines["a"].processes(CONTAINER))


def test_a_container_with_one_serve_off_preset_is_no_preset_and_that_serve_is_named(fleet_world: World, tmp_path: Path) -> None:
    serve_by_hand(fleet_world)
    container = fleet_world.engines["a"].containers[CONTAINER]
    container["Processes"] = (*container["Processes"], serve_process([f"{SWITCH}=9"], pid=9))
    manifest = load_manifest(write_manifest(tmp_path / "project", MANIFEST))
    preset, problems = _serve_against_presets(manifest, reading_of(fleet_world), "a", None)
    assert preset is None
    (problem,) = problems
    assert says(problem, "a pid 9")


def test_every_difference_of_a_serve_is_named_one_after_another(fleet_world: World, tmp_path: Path) -> None:
    serve_by_hand(fleet_world)
    fleet_world.engines["a"].containers[CONTAINER]["Processes"] = (serve_process([f"{SWITCH}=9"], ("--max-model-len", "2048")),)
    manifest = load_manifest(write_manifest(tmp_path / "project", MANIFEST))
    (problem,) = _serve_against_presets(manifest, reading_of(fleet_world), "a", None)[1]
    assert says(problem, "switches {'KVS_PACK': '9'} (the preset: {}); --max-model-len 2048")


def test_a_deployed_preset_the_manifest_no_longer_has_is_compared_with_the_nearest(fleet_world: World, tmp_path: Path) -> None:
    serve_by_hand(fleet_world, {"a": [f"{SWITCH}=9"]})
    manifest = load_manifest(write_manifest(tmp_path / "project", MANIFEST))
    preset, problems = _serve_against_presets(manifest, reading_of(fleet_world), "a", "gone")
    assert preset is None
    (problem,) = problems
    assert says(problem, "a pid 1 is not preset")
