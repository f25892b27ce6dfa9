"""Exact-value tests of transitions.py that the mutation run showed were missing: launcher, walks, records, readiness."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import threading
from pathlib import Path

import pytest

import kvbake.ship.adapters.transitions as transitions
from kvbake.deployfile import Deployment, Drafter, Launcher, Node, Readiness
from kvbake.errors import DivergedError, RolloutError
from kvbake.launcher.core.node_launch import NodeLaunch
from kvbake.ship.core.journal import Journal, NodePlan, journal_from_dict, read_diverged, read_journal
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.release import Release
from kvbake.ship.adapters.fleet import Fleet

from fake_engine import FakeEngine

REPO = "reg:5000/kvbake/x"
CONTAINER = "serve"


def release(preset: str = "packing", switches=None, args: tuple[str, ...] = ("--served-model-name", "my model")) -> Release:
    digest = "sha256:" + hashlib.sha256(preset.encode()).hexdigest()
    return Release(image=f"{REPO}@{digest}", config_digest=digest, layers=("sha256:base", "sha256:thin-" + preset),
                   labels={"k": preset}, preset=preset, switches=dict(switches or {"S": "3"}), max_model_len=4096,
                   launcher_args=args, deployed_by="ops", deployed_at="t", reason="r", override=None)


def fleet_with(tmp_path: Path, command: tuple[str, ...], timeout_s: float = 30, stores=("classic", "containerd")) -> Fleet:
    engines = {name: FakeEngine(name, store) for name, store in zip(("a", "b"), stores)}
    deployment = Deployment(tmp_path / "deploy.yaml", (Node("a", "unix:///a", "head"), Node("b", "unix:///b", "worker")),
                            Launcher(command, CONTAINER, timeout_s), 900)
    return Fleet(deployment, engines, REPO, ("S",), ("/src/x.py",), "/src")


class EngineSeeingTheLauncher(FakeEngine):
    """A node whose serving container the launcher process (re)created: it appears once `launched` exists."""

    def __init__(self, name: str, launched: Path) -> None:
        super().__init__(name)
        self.launched = launched
        self.recreated = False

    def container_inspect(self, name: str):
        if self.launched.exists() and not self.recreated:
            self.recreated = True
            self.run_serving(name, "sha256:x", [])
        return super().container_inspect(name)


def shell_launcher(script: str, *args: str) -> tuple[str, ...]:
    """A launcher command that runs `script` in /bin/sh with `args` as $1, $2, ... (fast to start)."""
    return ("/bin/sh", "-c", script, "launcher", *args)


DUMP_ENV = 'env -0 > "$1"'
SHELL_OWN = ("PWD", "OLDPWD", "SHLVL", "_")  # what the shell itself sets, whatever it was told


# --- restart: the operator's launcher ---------------------------------------------------------

def test_restart_runs_the_launcher_with_the_nodes_environment_and_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = tmp_path / "seen.json"
    fleet = fleet_with(tmp_path, shell_launcher(DUMP_ENV, str(seen)))
    monkeypatch.setenv("KEEP_ME", "inherited")
    rel = release()
    fleet.engines["b"] = EngineSeeingTheLauncher("b", seen)
    transitions.restart(fleet, "b", rel)
    assert fleet.engines["b"].containers[CONTAINER]["State"] == {"Running": True}
    folder = tmp_path / ".kvbake" / "deploy" / "runtime" / "b"
    argv = ["--max-model-len", "4096", "--served-model-name", "my model"]
    seen_env = dict(item.split("=", 1) for item in seen.read_text().split("\0") if item)
    stable = {
        "KEEP_ME": "inherited", "DOCKER_HOST": "unix:///b", "KVBAKE_NODE": "b", "KVBAKE_ROLE": "worker",
        "KVBAKE_IMAGE": f"{REPO}:current", "KVBAKE_CONTAINER": CONTAINER, "KVBAKE_ENV_FILE": str(folder / "ranks.env"),
        "KVBAKE_ARGS_FILE": str(folder / "launcher.args"), "KVBAKE_MAX_MODEL_LEN": "4096",
        "KVBAKE_LAUNCHER_ARGS": shlex.join(argv), "KVBAKE_LAUNCHER_ARGS_JSON": json.dumps(argv)}
    assert {key: seen_env.get(key) for key in stable} == stable
    files = {"ranks.env": folder / "ranks.env", "launcher.args": folder / "launcher.args"}
    told = transitions.launcher_env(fleet, "b", rel, transitions.settings_of_release(rel), files)
    expected_env = {**os.environ, **told}
    for name in SHELL_OWN:
        seen_env.pop(name, None)
        expected_env.pop(name, None)
    assert seen_env == expected_env
    settings = transitions.settings_of_release(rel)
    assert (folder / "ranks.env").read_text() == settings.env_text()
    assert (folder / "launcher.args").read_text() == settings.args_text()
    assert sorted(p.name for p in folder.iterdir()) == ["launcher.args", "ranks.env"]


def test_restart_without_a_release_removes_the_serving_container_and_launches_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "launched"
    fleet = fleet_with(tmp_path, shell_launcher(': > "$1"', str(marker)))
    fleet.engines["a"].run_serving(CONTAINER, "sha256:x", [])
    fleet.engines["b"].run_serving(CONTAINER, "sha256:x", [])
    transitions.restart(fleet, "a", None)
    assert CONTAINER not in fleet.engines["a"].containers
    assert CONTAINER in fleet.engines["b"].containers
    assert not marker.exists()
    assert not (tmp_path / ".kvbake").exists()


@pytest.mark.parametrize(("code", "message"), [
    ("printf 'starting\\nGPU busy\\n' >&2; exit 3", "launcher on a exited 3 (GPU busy)"),
    ("printf '  \\n' >&2; exit 1", "launcher on a exited 1 (no output)"),
    ("echo only stdout; exit 2", "launcher on a exited 2 (no output)"),
])
def test_a_failing_launcher_is_a_rollout_error_with_its_last_line(tmp_path: Path, code: str, message: str) -> None:
    fleet = fleet_with(tmp_path, shell_launcher(code))
    with pytest.raises(RolloutError) as caught:
        transitions.restart(fleet, "a", release())
    assert type(caught.value) is RolloutError
    assert (caught.value.message, caught.value.fix) == (message, "fix the launcher, then deploy again (every node was reverted)")


def test_a_launcher_that_succeeds_after_writing_to_stderr_is_fine(tmp_path: Path) -> None:
    launched = tmp_path / "launched"
    fleet = fleet_with(tmp_path, shell_launcher(': > "$1"; echo warning >&2', str(launched)))
    fleet.engines["a"] = EngineSeeingTheLauncher("a", launched)
    assert transitions.restart(fleet, "a", release()) is None


def test_a_launcher_that_cannot_start_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-launcher")
    fleet = fleet_with(tmp_path, (missing, "arg"))
    with pytest.raises(RolloutError) as caught:
        transitions.restart(fleet, "b", release())
    assert type(caught.value) is RolloutError
    assert caught.value.exit_code == 12
    assert all(field in caught.value.message for field in ("on b", "FileNotFoundError", missing))
    assert "launcher.command" in caught.value.fix


def test_a_launcher_that_overruns_its_timeout_is_named(tmp_path: Path) -> None:
    command = shell_launcher("exec sleep 30")
    fleet = fleet_with(tmp_path, command, timeout_s=0.1)
    with pytest.raises(RolloutError) as caught:
        transitions.restart(fleet, "a", release())
    assert all(field in caught.value.message for field in ("on a", "TimeoutExpired", "0.1 seconds"))
    assert "launcher.command" in caught.value.fix


def test_rank_files_are_written_exactly_and_rewritten(tmp_path: Path) -> None:
    settings = transitions.settings_of_release(release())
    folder = tmp_path / "deep" / "runtime" / "a"
    files = transitions.write_rank_files(folder, settings)
    assert files == {"ranks.env": folder / "ranks.env", "launcher.args": folder / "launcher.args"}
    assert (folder / "ranks.env").read_text() == settings.env_text()
    assert (folder / "launcher.args").read_text() == settings.args_text()
    other = transitions.settings_of_release(release("other", {"S": "1"}, ()))
    assert transitions.write_rank_files(folder, other) == files
    assert (folder / "ranks.env").read_text() == other.env_text()


# --- the fleet and its records ----------------------------------------------------------------

def test_the_fleet_names_its_nodes_tags_and_expected_ids(tmp_path: Path) -> None:
    fleet = fleet_with(tmp_path, ("launch",))
    rel = release()
    assert fleet.node("b") == Node("b", "unix:///b", "worker")
    assert (fleet.tag("current"), fleet.tag("previous")) == (f"{REPO}:current", f"{REPO}:previous")
    assert fleet.expected_id("a", rel) == (rel.config_digest, "config digest")
    assert fleet.expected_id("b", rel) == (rel.config_digest, "manifest digest")


def test_records_round_trip_and_an_absent_record_is_none() -> None:
    current, previous = release("packing"), release("control", {})
    records = transitions.records_of(current, previous)
    assert records == {"current": json.loads(transitions.release_to_json(current)),
                       "previous": json.loads(transitions.release_to_json(previous)), "adopted": None}
    assert transitions.release_of(records, "current") == current
    assert transitions.release_of(records, "previous") == previous
    assert transitions.records_of(None, None) == {"current": None, "previous": None, "adopted": None}
    assert transitions.release_of(transitions.records_of(None, None, previous), "adopted") == previous
    assert transitions.release_of({"current": None}, "current") is None
    assert transitions.release_of({}, "previous") is None


def test_retag_points_both_tags_or_removes_them(tmp_path: Path) -> None:
    fleet = fleet_with(tmp_path, ("launch",))
    engine = fleet.engines["a"]
    engine.images.update({image: {"Id": image} for image in ("sha256:new", "sha256:old")})
    transitions.retag(fleet, "a", "sha256:new", "sha256:old")
    assert engine.tags == {f"{REPO}:current": "sha256:new", f"{REPO}:previous": "sha256:old"}
    transitions.retag(fleet, "a", "sha256:new", None)
    assert engine.tags == {f"{REPO}:current": "sha256:new"}
    transitions.retag(fleet, "a", None, "")
    assert engine.tags == {}
    assert fleet.engines["b"].tags == {}


PLAN = NodePlan("a", "sha256:" + "b" * 64, None, "sha256:" + "a" * 64, "sha256:" + "b" * 64, {"current": "before"}, {"current": "after"})


def test_each_side_of_a_plan_is_its_own_triple() -> None:
    assert transitions._side(PLAN, "after") == (PLAN.after_current, PLAN.after_previous, {"current": "after"})
    assert transitions._side(PLAN, "before") == (PLAN.before_current, None, {"current": "before"})


@pytest.mark.parametrize(("image_id", "short"), [("sha256:0123456789abcdef", "0123456789ab"), (None, "none"), ("", "none")])
def test_short_ids_drop_the_algorithm(image_id, short: str) -> None:
    assert transitions._short(image_id) == short


@pytest.mark.parametrize(("plan", "marker"), [
    (PLAN, PLAN.after_current),
    (NodePlan("a", "sha256:before", None, "", None, {}, {}), "sha256:before"),
    (NodePlan("a", None, None, "", None, {}, {}), f"{REPO}:staged"),
])
def test_the_marker_image_is_one_the_node_surely_holds(tmp_path: Path, plan: NodePlan, marker: str) -> None:
    assert transitions.marker_image(fleet_with(tmp_path, ("launch",)), plan) == marker


# --- whole transitions on fake nodes ----------------------------------------------------------


PACKING = release("packing", {"S": "3"})
CONTROL = release("control", {"S": "1"})


class Scene:
    """Two classic-store nodes holding both releases, a launcher that starts what it is told, and every journal written."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fleet = fleet_with(tmp_path, ("launch",), stores=("classic", "classic"))
        self.folder = self.fleet.deployment.state_dir
        self.failing: set[str] = set()
        self.journals: list[tuple[str, tuple[str, ...]]] = []
        self.launches: list[tuple[str, str | None, str | None]] = []
        for engine in self.fleet.engines.values():
            for r in (PACKING, CONTROL):
                engine.images[r.config_digest] = {"Id": r.config_digest, "RootFS": {"Layers": list(r.layers)},
                                                  "Config": {"Labels": dict(r.labels), "Env": []}}
        original_write = transitions.write_journal

        def recording_write(folder: Path, journal: Journal) -> None:
            self.journals.append((journal.phase, journal.done))
            original_write(folder, journal)

        def launcher(fleet: Fleet, name: str, rel: Release | None, replacing: Release | None = None) -> None:
            self.launches.append((name, rel.preset if rel else None, replacing.preset if replacing else None))
            if rel is None:
                fleet.engines[name].remove_container(CONTAINER)
                return
            if f"{name}:{rel.preset}" in self.failing:
                raise RolloutError(f"launcher on {name} exited 1 (GPU busy)", "fix the launcher")
            fleet.engines[name].run_serving(CONTAINER, f"{REPO}:current", rel.env(), ("--max-model-len", str(rel.max_model_len), *rel.launcher_args))

        monkeypatch.setattr(transitions, "write_journal", recording_write)
        monkeypatch.setattr(transitions, "restart", launcher)
        monkeypatch.setattr(transitions, "who", lambda: "op@host:1")

    def journal(self, before: Release | None, after: Release) -> Journal:
        plans = tuple(NodePlan(name, before.config_digest if before else None, None, after.config_digest,
                               before.config_digest if before else None, transitions.records_of(before, None),
                               transitions.records_of(after, before)) for name in ("a", "b"))
        return Journal("deploy-1", "deploy", after.id, plans)

    def audit(self, name: str) -> list[str]:
        return [line.split(" ", 2)[2] for line in NodeState(name, self.fleet.engines[name]).read().audit.splitlines()]


@pytest.fixture()
def scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Scene:
    return Scene(tmp_path, monkeypatch)


FORWARD_STEPS = ("after:retag:a", "after:retag:b", "after:restart:a", "after:restart:b")
BACK_STEPS = ("before:retag:a", "before:retag:b", "before:restart:a", "before:restart:b")


def test_a_transition_journals_every_step_then_settles(scene: Scene) -> None:
    transitions.run_transition(scene.fleet, scene.journal(None, PACKING), scene.folder)
    assert scene.journals == [("forward", ()), *(("forward", FORWARD_STEPS[:i]) for i in range(1, 5))]
    assert (read_journal(scene.folder), read_diverged(scene.folder)) == (None, None)
    for name in ("a", "b"):
        records = NodeState(name, scene.fleet.engines[name]).read()
        assert (records.current, records.previous, records.transition, records.diverged) == (PACKING, None, None, None)
        assert scene.fleet.engines[name].tags == {f"{REPO}:current": PACKING.config_digest}
        assert scene.audit(name) == ["deploy deploy-1 begins", f"deploy deploy-1 after: current={PACKING.config_digest[7:19]} previous=none",
                                     "deploy deploy-1 done"]
        assert scene.fleet.engines[name].containers["kvbake-state"]["Image"] == PACKING.config_digest


def test_a_failed_launch_walks_every_node_back_to_the_before_side(scene: Scene) -> None:
    transitions.run_transition(scene.fleet, scene.journal(None, CONTROL), scene.folder)
    scene.journals.clear()
    scene.failing.add("b:packing")
    with pytest.raises(RolloutError) as caught:
        transitions.run_transition(scene.fleet, scene.journal(CONTROL, PACKING), scene.folder)
    assert all(field in caught.value.message for field in ("on b", "exited 1", "GPU busy"))
    # the revert keeps the forward steps it walks back, so an interrupted revert still knows them
    assert scene.journals == [("forward", ()), *(("forward", FORWARD_STEPS[:i]) for i in range(1, 5)),
                              *(("reverting", FORWARD_STEPS + BACK_STEPS[:i]) for i in range(1, 5))]
    assert (read_journal(scene.folder), read_diverged(scene.folder)) == (None, None)
    for name in ("a", "b"):
        records = NodeState(name, scene.fleet.engines[name]).read()
        assert (records.current, records.previous, records.transition, records.diverged) == (CONTROL, None, None, None)
        assert scene.fleet.engines[name].tags == {f"{REPO}:current": CONTROL.config_digest}
        assert scene.fleet.engines[name].containers[CONTAINER]["Config"]["Env"] == ["S=1"]
    assert scene.audit("a")[-3:] == [f"deploy deploy-1 after: current={PACKING.config_digest[7:19]} previous={CONTROL.config_digest[7:19]}",
                                     f"deploy deploy-1 before: current={CONTROL.config_digest[7:19]} previous=none",
                                     "deploy deploy-1 reverted"]


def test_a_rank_that_fails_verification_after_the_forward_walk_is_reverted(scene: Scene) -> None:
    for engine in scene.fleet.engines.values():
        engine.images[PACKING.config_digest]["Config"]["Labels"] = {"k": "wrong"}
    with pytest.raises(RolloutError) as caught:
        transitions.run_transition(scene.fleet, scene.journal(None, PACKING), scene.folder)
    assert caught.value.message.count("label k differs") == 2 and all(f"{node}: label k" in caught.value.message for node in "ab")
    assert "reverted" in caught.value.fix
    assert all(CONTAINER not in engine.containers for engine in scene.fleet.engines.values())
    assert read_journal(scene.folder) is None


def test_a_revert_that_cannot_verify_marks_the_deployment_and_every_node_diverged(scene: Scene) -> None:
    transitions.run_transition(scene.fleet, scene.journal(None, CONTROL), scene.folder)
    scene.fleet.engines["b"].images[CONTROL.config_digest]["RootFS"]["Layers"] = ["sha256:other"]
    with pytest.raises(DivergedError) as caught:
        transitions.revert(scene.fleet, scene.journal(CONTROL, PACKING), scene.folder)
    revert_error = ("after the revert: b: the running image's layers differ from the release; the ranks disagree: "
                    f"a runs 2 layers with {{'S': '1'}}, 2 arguments; b runs 1 layers with {{'S': '1'}}, 2 arguments; fix: see below")
    details = {"journal": "deploy-1", "kind": "deploy", "cause": None, "revert_error": revert_error,
               "repair": "python build.py deploy --revert --deploy deploy.yaml", "by": "op@host:1"}
    assert caught.value.exit_code == 13
    assert all(field in caught.value.message for field in ("deploy-1 failed (interrupted)", revert_error))
    assert caught.value.fix.endswith(details["repair"])
    assert read_diverged(scene.folder) == details
    assert scene.journals[-1] == ("reverting", BACK_STEPS)
    for name in ("a", "b"):
        assert NodeState(name, scene.fleet.engines[name]).read().diverged == details
        assert scene.audit(name)[-1] == "deploy deploy-1 DIVERGED"


def test_a_diverged_mark_names_the_cause_of_the_failed_transition(scene: Scene) -> None:
    scene.fleet.engines["b"].images[CONTROL.config_digest]["Config"]["Labels"] = {}
    with pytest.raises(DivergedError) as caught:
        transitions.revert(scene.fleet, scene.journal(CONTROL, PACKING), scene.folder, cause=RolloutError("it broke", "fix it"))
    assert caught.value.message.startswith("DIVERGED: deploy deploy-1 failed (it broke; fix: fix it) and the revert failed too (")
    assert read_diverged(scene.folder)["cause"] == "it broke; fix: fix it"


def test_a_diverged_adoption_names_adopt_revert_the_command_that_repairs_it(scene: Scene) -> None:
    """deploy --revert refuses an adoption's journal (it names adopt --revert), so the mark must name adopt's own."""
    scene.fleet.engines["b"].images[CONTROL.config_digest]["Config"]["Labels"] = {}
    adoption = dataclasses.replace(scene.journal(CONTROL, PACKING), kind="adopt")
    with pytest.raises(DivergedError) as caught:
        transitions.revert(scene.fleet, adoption, scene.folder)
    assert caught.value.fix.endswith("python build.py adopt --revert --deploy deploy.yaml")
    assert read_diverged(scene.folder)["repair"] == "python build.py adopt --revert --deploy deploy.yaml"


def test_a_node_that_cannot_be_marked_diverged_is_logged_and_the_others_are_marked(scene: Scene, caplog: pytest.LogCaptureFixture) -> None:
    scene.fleet.engines["a"].down = True
    with caplog.at_level("WARNING", logger="kvbake.ship.adapters.transitions"):
        transitions.mark_nodes_diverged(scene.fleet, scene.journal(None, PACKING), {"why": "test"})
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "node a: could not record the divergence (a: the engine is unreachable; fix: start it)")]
    scene.fleet.engines["a"].down = False
    assert NodeState("a", scene.fleet.engines["a"]).read().diverged is None
    assert NodeState("b", scene.fleet.engines["b"]).read().diverged == {"why": "test"}
    assert scene.fleet.engines["b"].containers["kvbake-state"]["Image"] == PACKING.config_digest


def test_publishing_gives_every_node_the_journal(scene: Scene) -> None:
    journal = scene.journal(None, PACKING)
    transitions.publish(scene.fleet, journal, scene.folder)
    for name in ("a", "b"):
        kept = NodeState(name, scene.fleet.engines[name]).read().transition
        assert journal_from_dict(kept) == journal
        assert scene.audit(name) == ["deploy deploy-1 begins"]


PACKING_ARGS = ("--max-model-len", "4096", "--served-model-name", "my model")


def test_verify_ranks_skips_nodes_without_a_release_and_names_every_difference(scene: Scene) -> None:
    scene.fleet.engines["a"].tags[f"{REPO}:current"] = PACKING.config_digest
    scene.fleet.engines["a"].run_serving(CONTAINER, f"{REPO}:current", ["S=3"], PACKING_ARGS)
    assert transitions.verify_ranks(scene.fleet, {"a": PACKING, "b": None}) == []
    scene.fleet.engines["b"].tags[f"{REPO}:current"] = PACKING.config_digest
    scene.fleet.engines["b"].run_serving(CONTAINER, f"{REPO}:current", ["S=1"], PACKING_ARGS[:2])
    assert transitions.verify_ranks(scene.fleet, {"b": PACKING, "a": PACKING}) == [
        "b: pid 1: switch S is 1, expected 3",
        "b: pid 1: the preset's --served-model-name my model is not in its command line",
        "the ranks disagree: a runs 2 layers with {'S': '3'}, 2 arguments; b runs 2 layers with {'S': '1'}, 1 arguments"]
    assert transitions.verify_ranks(scene.fleet, {}) == []


def test_observing_a_node_without_a_serving_container(scene: Scene) -> None:
    assert scene.fleet.observe("a") == (None, None)
    assert transitions.verify_ranks(scene.fleet, {"a": PACKING}) == ["a: the serving container is not there"]


# --- an adopted serve: set aside and brought back, never launched ------------------------------

def adopted_release(container_id: str = "adopted-1", kept_as: str = "serve-kept") -> Release:
    return dataclasses.replace(release("adopted", {}), adopted={"container_id": container_id, "kept_as": kept_as})


def serving_container(engine: FakeEngine, container_id: str, name: str = CONTAINER, running: bool = True) -> None:
    engine.containers[name] = {"Id": container_id, "Name": name, "Image": "sha256:x", "Config": {"Env": [], "Labels": {}},
                               "State": {"Running": running}, "Mounts": []}


class EngineRefusingTakenNames(FakeEngine):
    """Like a real engine: a container cannot be renamed onto a name another container holds."""

    def rename_and_start(self, name: str, new_name: str) -> None:
        if new_name in self.containers:
            raise AssertionError(f"the name {new_name} is taken")
        super().rename_and_start(name, new_name)


def test_bringing_back_an_adopted_serve_restarts_its_own_container(tmp_path: Path) -> None:
    marker = tmp_path / "launched"
    fleet = fleet_with(tmp_path, shell_launcher(': > "$1"', str(marker)))
    engine = fleet.engines["a"] = EngineRefusingTakenNames("a")
    serving_container(engine, "kvbake-1")
    serving_container(engine, "adopted-1", name="serve-kept", running=False)
    transitions.restart(fleet, "a", adopted_release(), release())
    assert sorted(engine.containers) == [CONTAINER]
    assert (engine.containers[CONTAINER]["Id"], engine.containers[CONTAINER]["State"], engine.containers[CONTAINER]["Name"]) == (
        "adopted-1", {"Running": True}, CONTAINER)
    assert not marker.exists()


def test_an_adopted_serve_already_serving_restarts_in_place_with_its_gang(tmp_path: Path) -> None:
    fleet = fleet_with(tmp_path, ("launch",))
    engine = fleet.engines["a"]
    serving_container(engine, "adopted-1")
    serving_container(engine, "other", name="serve-kept", running=False)
    stops = []
    stop = engine.stop
    engine.stop = lambda container, timeout_s=30: (stops.append(container), stop(container, timeout_s))
    transitions.restart(fleet, "a", adopted_release())
    assert {name: c["Id"] for name, c in engine.containers.items()} == {CONTAINER: "adopted-1", "serve-kept": "other"}
    assert engine.containers[CONTAINER]["State"]["Running"] and stops == ["adopted-1"], "stopped, then started again"


@pytest.mark.parametrize("serving", [None, "kvbake-1"])
def test_an_adopted_serve_whose_kept_container_is_gone_cannot_come_back(tmp_path: Path, serving) -> None:
    fleet = fleet_with(tmp_path, ("launch",))
    if serving:
        serving_container(fleet.engines["b"], serving)
    with pytest.raises(RolloutError) as caught:
        transitions.restart(fleet, "b", adopted_release())
    assert type(caught.value) is RolloutError
    assert all(field in caught.value.message for field in ("node b", "serve-kept", "is gone"))
    assert "deploy --preset" in caught.value.fix
    assert [c["Id"] for c in fleet.engines["b"].containers.values()] == ([serving] if serving else [])


def test_replacing_an_adopted_serve_sets_its_container_aside_before_the_launch(tmp_path: Path) -> None:
    launched = tmp_path / "launched"
    fleet = fleet_with(tmp_path, shell_launcher(': > "$1"', str(launched)))
    seeing = EngineSeeingTheLauncher("a", launched)
    fleet.engines["a"] = seeing
    serving_container(seeing, "adopted-1")
    transitions.restart(fleet, "a", release(), adopted_release())
    assert launched.exists()
    assert (seeing.containers["serve-kept"]["Id"], seeing.containers["serve-kept"]["State"]) == ("adopted-1", {"Running": False})
    assert seeing.containers[CONTAINER]["State"] == {"Running": True}


def test_a_serve_that_is_not_the_adopted_one_is_not_set_aside(tmp_path: Path) -> None:
    fleet = fleet_with(tmp_path, ("launch",))
    engine = fleet.engines["a"]
    serving_container(engine, "someone-else")
    transitions.restart(fleet, "a", None, adopted_release())
    assert engine.containers == {}
    transitions.set_adopted_aside(fleet, "b", adopted_release())
    assert fleet.engines["b"].containers == {}


def test_reverting_to_nothing_from_an_adopted_serve_keeps_it_aside(tmp_path: Path) -> None:
    fleet = fleet_with(tmp_path, ("launch",))
    engine = fleet.engines["a"]
    serving_container(engine, "adopted-1")
    transitions.restart(fleet, "a", None, adopted_release())
    assert {name: (c["Id"], c["State"]["Running"]) for name, c in engine.containers.items()} == {"serve-kept": ("adopted-1", False)}


# --- why a serving container is not running ---------------------------------------------------

@pytest.mark.parametrize(("log", "reason"), [
    ([], "the serving container serve on a is not running (exit code 3: no output)"),
    (["loading", "CUDA out of memory"], "the serving container serve on a is not running (exit code 3: CUDA out of memory)"),
    (["loading", "ValueError: the model does not fit", *(f"shutting down {n}" for n in range(5))],
     "the serving container serve on a is not running (exit code 3: ValueError: the model does not fit)"),
])
def test_not_running_names_the_exit_code_and_the_last_log_line(tmp_path: Path, log: list[str], reason: str) -> None:
    fleet = fleet_with(tmp_path, ("launch",))
    serving_container(fleet.engines["a"], "c1", running=False)
    fleet.engines["a"].containers[CONTAINER].update({"Log": log, "State": {"Running": False, "ExitCode": 3}})
    assert transitions.not_running(fleet, "a") == reason


@pytest.mark.parametrize("state, count", [({"Running": True, "Restarting": True}, 0), ({"Running": True}, 2)])
def test_a_container_that_is_restarting_or_has_restarted_keeps_restarting(tmp_path: Path, state: dict, count: int) -> None:
    fleet = fleet_with(tmp_path, ("launch",))
    serving_container(fleet.engines["a"], "c1")
    fleet.engines["a"].containers[CONTAINER].update({"State": {**state, "ExitCode": 1}, "RestartCount": count, "Log": ["bad"]})
    assert transitions.not_running(fleet, "a") == "the serving container serve on a keeps restarting (exit code 1: bad)"


def test_not_running_is_none_for_a_new_running_container_and_names_an_old_or_absent_one(tmp_path: Path) -> None:
    fleet = fleet_with(tmp_path, ("launch",))
    assert transitions.not_running(fleet, "a") == "the serving container serve does not exist on a"
    serving_container(fleet.engines["a"], "c1")
    assert transitions.not_running(fleet, "a") is None
    assert transitions.not_running(fleet, "a", "c0") is None
    assert transitions.not_running(fleet, "a", "c1") == "the serving container serve on a is still the old one (it was not recreated)"


def test_a_node_with_no_image_yet_is_marked_diverged_from_the_staged_tag(scene: Scene) -> None:
    journal = Journal("deploy-2", "deploy", "r", (NodePlan("a", None, None, "", None, {}, {}),))
    scene.fleet.engines["a"].tags[f"{REPO}:staged"] = "sha256:staged"
    transitions.mark_nodes_diverged(scene.fleet, journal, {"why": "test"})
    assert NodeState("a", scene.fleet.engines["a"]).read().diverged == {"why": "test"}
    assert scene.fleet.engines["a"].containers["kvbake-state"]["Image"] == "sha256:staged"


# --- what the launcher is told ----------------------------------------------------------------

def launcher_env_of(tmp_path: Path, nodes: tuple[Node, ...], name: str, drafter=None, extra=None) -> dict[str, str]:
    deployment = Deployment(tmp_path / "deploy.yaml", nodes, Launcher(("launch",), CONTAINER, 30, dict(extra or {})), 900,
                            drafter=Drafter(*drafter) if drafter else None)
    fleet = Fleet(deployment, {n.name: FakeEngine(n.name) for n in nodes}, REPO, ("S",), ("/src/x.py",), "/src")
    rel = release(args=("--x", "a b"))
    files = {"ranks.env": tmp_path / "e", "launcher.args": tmp_path / "l"}
    return transitions.launcher_env(fleet, name, rel, transitions.settings_of_release(rel), files)


THREE = (Node("w1", "unix:///w1", "worker", "10.0.0.2"), Node("h", "unix:///h", "head", "10.0.0.1"), Node("w2", "unix:///w2", "worker", "10.0.0.3"))


def told(tmp_path: Path, node: str, role: str, rank: str, nnodes: str, address: str, head: str, drafter_url: str, positions: str,
         extra=None) -> dict[str, str]:
    argv = ["--max-model-len", "4096", "--x", "a b"]
    return {**(extra or {}), "DOCKER_HOST": f"unix:///{node}", "KVBAKE_NODE": node, "KVBAKE_ROLE": role, "KVBAKE_IMAGE": f"{REPO}:current",
            "KVBAKE_CONTAINER": CONTAINER, "KVBAKE_ENV_FILE": str(tmp_path / "e"), "KVBAKE_ARGS_FILE": str(tmp_path / "l"),
            "KVBAKE_MAX_MODEL_LEN": "4096", "KVBAKE_LAUNCHER_ARGS": shlex.join(argv), "KVBAKE_LAUNCHER_ARGS_JSON": json.dumps(argv),
            "KVBAKE_PRESET": "packing", "KVBAKE_NODE_RANK": rank, "KVBAKE_NNODES": nnodes, "KVBAKE_NODE_ADDRESS": address,
            "KVBAKE_HEAD_ADDRESS": head, "KVBAKE_DRAFTER_URL": drafter_url, "KVBAKE_DRAFTER_MAX_POSITIONS": positions,
            "KVBAKE_NODE_LAUNCH_JSON": NodeLaunch().to_json(), "KVBAKE_WORKDIR": ""}


def test_the_launcher_is_told_the_node_its_rank_the_head_and_the_drafter(tmp_path: Path) -> None:
    extra = {"HF_HOME": "/models", "KVBAKE_NODE": "not this"}
    assert launcher_env_of(tmp_path, THREE, "w2", ("http://drafter:8001", 65536), extra) == told(
        tmp_path, "w2", "worker", "2", "3", "10.0.0.3", "10.0.0.1", "http://drafter:8001", "65536", {"HF_HOME": "/models"})
    assert launcher_env_of(tmp_path, THREE, "h", ("http://drafter:8001", None)) == told(
        tmp_path, "h", "head", "0", "3", "10.0.0.1", "10.0.0.1", "http://drafter:8001", "")
    assert launcher_env_of(tmp_path, THREE, "w1")["KVBAKE_NODE_RANK"] == "1"


def test_without_a_head_or_a_drafter_those_values_are_empty(tmp_path: Path) -> None:
    nodes = (Node("w1", "unix:///w1", "worker"), Node("w2", "unix:///w2", "worker"))
    assert launcher_env_of(tmp_path, nodes, "w2") == told(tmp_path, "w2", "worker", "1", "2", "", "", "", "")


@pytest.mark.parametrize(("name", "rank"), [("h", 0), ("w1", 1), ("w2", 2)])
def test_the_head_is_rank_zero_and_the_workers_keep_their_order(tmp_path: Path, name: str, rank: int) -> None:
    deployment = Deployment(tmp_path / "deploy.yaml", THREE, Launcher(("launch",), CONTAINER, 30), 900)
    assert transitions.node_rank(deployment, name) == rank


def test_a_launcher_that_exits_0_without_recreating_the_container_is_named(tmp_path: Path) -> None:
    fleet = fleet_with(tmp_path, ("/bin/true",))
    serving_container(fleet.engines["a"], "old-1")
    with pytest.raises(RolloutError) as caught:
        transitions.restart(fleet, "a", release())
    assert all(field in caught.value.message for field in ("on a", "exited 0", "serve", "not recreated"))
    assert "$KVBAKE_CONTAINER" in caught.value.fix
    assert [c["Id"] for c in fleet.engines["a"].containers.values()] == ["old-1"]


def test_a_start_group_passes_the_release_each_node_replaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = fleet_with(tmp_path, ("launch",))
    calls = []
    monkeypatch.setattr(transitions, "restart", lambda f, name, rel, replacing=None: calls.append((name, rel, replacing)))
    transitions.start_group(fleet, {"a": (PACKING, CONTROL)})
    transitions.start_group(fleet, {"b": (None, PACKING), "a": (CONTROL, None)})
    assert sorted(calls, key=lambda c: (c[0], c[1] is None)) == [("a", PACKING, CONTROL), ("a", CONTROL, None), ("b", None, PACKING)]


def test_every_rank_of_a_large_start_group_starts_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks that wait for each other while they start (a rendezvous) all come up, however many the group holds."""
    ranks = [f"n{i}" for i in range(40)]
    rendezvous = threading.Barrier(len(ranks), timeout=10)
    monkeypatch.setattr(transitions, "restart", lambda f, name, rel, replacing=None: rendezvous.wait())
    transitions.start_group(fleet_with(tmp_path, ("launch",)), {name: (PACKING, CONTROL) for name in ranks})
    assert not rendezvous.broken


def test_a_start_group_names_every_failed_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = fleet_with(tmp_path, ("launch",))

    def failing(f, name, rel, replacing=None):
        raise RolloutError(f"launcher on {name} exited 1 (x)", f"fix {name}")

    monkeypatch.setattr(transitions, "restart", failing)
    with pytest.raises(RolloutError) as caught:
        transitions.start_group(fleet, {"a": (PACKING, None), "b": (PACKING, None)})
    assert (caught.value.message, caught.value.fix) == ("launcher on a exited 1 (x); launcher on b exited 1 (x)", "fix a")


def test_settling_fresh_nodes_creates_their_state_from_the_marker_image(scene: Scene) -> None:
    journal = Journal("deploy-3", "deploy", "r", (NodePlan("a", None, None, "", None, {}, {}), NodePlan("b", None, None, "sha256:b", None, {}, {})))
    scene.fleet.engines["a"].tags[f"{REPO}:staged"] = "sha256:staged"
    scene.fleet.engines["b"].images["sha256:b"] = {"Id": "sha256:b"}
    transitions.settle(scene.fleet, journal, scene.folder, "done")
    assert scene.fleet.engines["a"].containers["kvbake-state"]["Image"] == "sha256:staged"
    assert scene.fleet.engines["b"].containers["kvbake-state"]["Image"] == "sha256:b"
    assert scene.audit("a") == ["deploy deploy-3 done"]


def test_a_failed_transition_whose_revert_fails_too_names_both(scene: Scene) -> None:
    transitions.run_transition(scene.fleet, scene.journal(None, CONTROL), scene.folder)
    scene.failing.add("b:packing")
    scene.fleet.engines["b"].images[CONTROL.config_digest]["Config"]["Labels"] = {}
    with pytest.raises(DivergedError) as caught:
        transitions.run_transition(scene.fleet, scene.journal(CONTROL, PACKING), scene.folder)
    assert caught.value.message.startswith("DIVERGED: deploy deploy-1 failed (launcher on b exited 1 (GPU busy); fix: fix the launcher) "
                                           "and the revert failed too (after the revert: b: label k differs; fix: see below)")
    assert read_diverged(scene.folder)["cause"] == "launcher on b exited 1 (GPU busy); fix: fix the launcher"


# --- waiting for the readiness probe ----------------------------------------------------------

def ready_fleet(tmp_path: Path, readiness=True) -> Fleet:
    fleet = fleet_with(tmp_path, ("launch",))
    probe = Readiness("http://127.0.0.1:8000/health", 200, 5.0, 0.1) if readiness else None
    return dataclasses.replace(fleet, deployment=dataclasses.replace(fleet.deployment, readiness=probe))


def test_readiness_is_awaited_once_with_a_probe_that_names_a_dead_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    fleet = ready_fleet(tmp_path)
    seen = []

    def waiting(readiness, dead_rank, **_):
        seen.append((readiness.url, dead_rank()))
        fleet.engines["b"].containers[CONTAINER]["State"] = {"Running": False, "ExitCode": 137}
        seen.append((readiness.url, dead_rank()))
        return 1.5

    monkeypatch.setattr(transitions, "wait_until_ready", waiting)
    serving_container(fleet.engines["a"], "a-1")
    serving_container(fleet.engines["b"], "b-1")
    with caplog.at_level("INFO", logger="kvbake.ship.adapters.transitions"):
        transitions.await_readiness(fleet, {"a": PACKING, "b": PACKING})
    assert seen == [("http://127.0.0.1:8000/health", None),
                    ("http://127.0.0.1:8000/health", "the serving container serve on b is not running (exit code 137: no output)")]
    assert [r.getMessage() for r in caplog.records] == ["the serve answered http://127.0.0.1:8000/health after 1.5 s"]


def test_an_adopted_serve_under_its_own_name_is_probed_for_death_by_that_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rollback to an adopted serve named otherwise than the launcher's container (a Ray cluster's `node`) waits
    for that serve: the launcher's container is gone by design, which is no dead rank."""
    fleet = ready_fleet(tmp_path)
    adopted = dataclasses.replace(adopted_release(), adopted={"container_id": "n-1", "kept_as": "node-kvbake-adopted", "name": "node"})
    seen = []
    monkeypatch.setattr(transitions, "wait_until_ready", lambda readiness, dead_rank, **_: seen.append(dead_rank()) or 0.0)
    for key in ("a", "b"):
        serving_container(fleet.engines[key], f"{key}-node", name="node")
    transitions.await_readiness(fleet, {"a": adopted, "b": adopted})
    fleet.engines["b"].containers["node"]["State"] = {"Running": False, "ExitCode": 1}
    transitions.await_readiness(fleet, {"a": adopted, "b": adopted})
    assert seen == [None, "the serving container node on b is not running (exit code 1: no output)"]


def test_the_wait_quotes_the_heads_serving_container_log_and_nothing_of_a_silent_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM exec'd into a container that keeps running logs there (its output goes to docker logs): a readiness
    timeout names its exception, read from the head's serving container, never from a worker's."""
    fleet = ready_fleet(tmp_path)
    heard = []
    monkeypatch.setattr(transitions, "wait_until_ready", lambda readiness, dead_rank, last_words: heard.append(last_words()) or 0.0)
    for key in ("a", "b"):
        serving_container(fleet.engines[key], f"{key}-1")
    fleet.engines["b"].containers[CONTAINER]["Log"] = ["RuntimeError: the worker's own"]
    transitions.await_readiness(fleet, {"a": PACKING, "b": PACKING})
    fleet.engines["a"].containers[CONTAINER]["Log"] = ["INFO starting", "ValueError: current platform cpu does not support ray.",
                                                       "RuntimeError: Engine core initialization failed. See root cause above."]
    transitions.await_readiness(fleet, {"a": PACKING, "b": PACKING})
    transitions.await_readiness(fleet, {"a": None, "b": PACKING})
    assert heard == ["", "ValueError: current platform cpu does not support ray.", ""]


def test_a_rank_without_a_release_is_not_probed_for_death(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = ready_fleet(tmp_path)
    seen = []
    monkeypatch.setattr(transitions, "wait_until_ready", lambda readiness, dead_rank, **_: seen.append(dead_rank()) or 0.0)
    serving_container(fleet.engines["a"], "a-1")
    transitions.await_readiness(fleet, {"a": PACKING, "b": None})
    assert seen == [None]


@pytest.mark.parametrize(("readiness", "releases"), [(False, {"a": PACKING}), (True, {"a": None, "b": None}), (True, {})])
def test_nothing_is_awaited_without_a_probe_or_without_a_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, readiness, releases) -> None:
    fleet = ready_fleet(tmp_path, readiness)
    monkeypatch.setattr(transitions, "wait_until_ready", lambda *args: pytest.fail("waited"))
    assert transitions.await_readiness(fleet, releases) is None


def test_each_launch_is_told_the_release_it_replaces(scene: Scene) -> None:
    transitions.run_transition(scene.fleet, scene.journal(None, CONTROL), scene.folder)
    transitions.run_transition(scene.fleet, scene.journal(CONTROL, PACKING), scene.folder)
    transitions.revert(scene.fleet, scene.journal(CONTROL, PACKING), scene.folder)
    assert scene.launches == [("a", "control", None), ("b", "control", None), ("a", "packing", "control"), ("b", "packing", "control"),
                              ("a", "control", "packing"), ("b", "control", "packing")]


def test_a_group_start_is_one_step_and_a_group_without_members_is_skipped(scene: Scene) -> None:
    together = dataclasses.replace(scene.fleet, deployment=dataclasses.replace(scene.fleet.deployment, start="together"))
    transitions.apply_side(together, scene.journal(None, PACKING), scene.folder, "after")
    assert scene.journals[-1] == ("planned", ("after:retag:a", "after:retag:b", "after:restart:a+b"))
    only_b = Journal("deploy-4", "deploy", "r", scene.journal(None, PACKING).nodes[1:])
    transitions.apply_side(scene.fleet, only_b, scene.folder, "after")
    assert scene.journals[-1] == ("planned", ("after:retag:b", "after:restart:b"))
    assert scene.launches[-1] == ("b", "packing", None)


def test_walking_fresh_nodes_creates_their_state_from_the_plans_image(scene: Scene) -> None:
    transitions.apply_side(scene.fleet, scene.journal(None, PACKING), scene.folder, "after")
    for name in ("a", "b"):
        assert scene.fleet.engines[name].containers["kvbake-state"]["Image"] == PACKING.config_digest
        assert NodeState(name, scene.fleet.engines[name]).read().current == PACKING


def test_publishing_to_a_node_without_images_uses_the_staged_tag(scene: Scene) -> None:
    scene.fleet.engines["a"].tags[f"{REPO}:staged"] = "sha256:staged"
    transitions.publish(scene.fleet, Journal("deploy-5", "deploy", "r", (NodePlan("a", None, None, "", None, {}, {}),)), scene.folder)
    assert scene.fleet.engines["a"].containers["kvbake-state"]["Image"] == "sha256:staged"


def test_verify_ranks_goes_on_after_a_node_without_a_release(scene: Scene) -> None:
    assert transitions.verify_ranks(scene.fleet, {"a": None, "b": PACKING}) == ["b: the serving container is not there"]


def test_the_fleet_checks_a_rank_against_its_release_its_node_and_the_bake(scene: Scene) -> None:
    engine = scene.fleet.engines["a"]
    engine.tags[f"{REPO}:current"] = PACKING.config_digest
    engine.run_serving(CONTAINER, f"{REPO}:current", ["S=3", "PYTHONPATH=/x"], PACKING_ARGS)
    engine.containers[CONTAINER]["Mounts"] = [{"Type": "bind", "Destination": "/src/x.py"}]
    container, image = scene.fleet.observe("a")
    assert scene.fleet.rank_failures("a", container, image, PACKING) == [
        "a: a bind mount at /src/x.py covers baked file /src/x.py",
        "a: PYTHONPATH is set to '/x' in the container, not as the image sets it ('unset')"]
    assert scene.fleet.check_rank("a", PACKING, {"S": "1"}).failures[2:] == (
        "a: pid 1: switch S is 3, expected 1", "a: pid 1: PYTHONPATH='/x' in its environment, not as the image sets it ('unset')")
    other = dataclasses.replace(PACKING, config_digest="sha256:" + "0" * 64)
    assert scene.fleet.rank_failures("a", container, image, other)[0] == (
        f"a: the container runs image {PACKING.config_digest[:19]}, not the release's config digest {'sha256:' + '0' * 12}")


def test_the_fleet_checks_an_adopted_rank_by_its_own_rules(scene: Scene) -> None:
    engine = scene.fleet.engines["b"]
    serving_container(engine, "adopted-1")
    engine.containers[CONTAINER]["Config"]["Env"] = ["S=9", "PYTHONPATH=/own"]
    adopted = dataclasses.replace(adopted_release(), layers=("sha256:l",), switches={"S": "9"})
    image = {"RootFS": {"Layers": ["sha256:l"]}}
    assert scene.fleet.rank_failures("b", engine.containers[CONTAINER], image, adopted) == []
    assert scene.fleet.rank_failures("b", engine.containers[CONTAINER], None, adopted) == [
        "b: the running image's layers differ from the adopted serve's"]
    assert scene.fleet.rank_failures("b", None, image, adopted) == ["b: the adopted serving container is not there"]




def test_walking_a_node_without_images_uses_the_staged_tag_for_its_state(scene: Scene) -> None:
    scene.fleet.engines["a"].tags[f"{REPO}:staged"] = "sha256:staged"
    transitions.apply_side(scene.fleet, Journal("deploy-6", "deploy", "r", (NodePlan("a", None, None, "", None, {}, {}),)),
                           scene.folder, "after")
    assert scene.fleet.engines["a"].containers["kvbake-state"]["Image"] == "sha256:staged"
    assert scene.launches == [("a", None, None)]


# --- an adopted container stays restorable until adopt --release ------------------------------

def test_settling_never_removes_the_adopted_container(scene: Scene) -> None:
    adopted = adopted_release()
    engine = scene.fleet.engines["a"]
    serving_container(engine, "adopted-1", name="serve-kept", running=False)
    keep = NodePlan("a", None, None, PACKING.config_digest, None, transitions.records_of(adopted, None),
                    transitions.records_of(PACKING, adopted))
    NodeState("a", engine).update(PACKING.config_digest, "seed", current=PACKING, previous=adopted)
    transitions.settle(scene.fleet, Journal("deploy-8", "deploy", "r", (keep,)), scene.folder, "done")
    assert "serve-kept" in engine.containers
    NodeState("a", engine).update(PACKING.config_digest, "seed", current=CONTROL, previous=PACKING)
    transitions.settle(scene.fleet, Journal("deploy-9", "deploy", "r", (keep,)), scene.folder, "done")
    assert "serve-kept" in engine.containers, "out of the rollback chain, still restorable until adopt --release"


def test_settling_keeps_the_adopted_container_that_serves_now(scene: Scene) -> None:
    adopted = adopted_release()
    engine = scene.fleet.engines["a"]
    serving_container(engine, "adopted-1", name="serve-kept", running=False)
    back = NodePlan("a", PACKING.config_digest, None, PACKING.config_digest, None, transitions.records_of(PACKING, adopted),
                    transitions.records_of(adopted, PACKING))
    NodeState("a", engine).update(PACKING.config_digest, "seed", current=adopted, previous=PACKING)
    transitions.settle(scene.fleet, Journal("deploy-10", "rollback", "r", (back,)), scene.folder, "done")
    assert "serve-kept" in engine.containers
