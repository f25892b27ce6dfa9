"""The ship core on fake node engines: deploy, rollback and recovery, table by table, with the node state compared
whole before and after every fault."""

from __future__ import annotations

from pathlib import Path

import pytest

import kvbake.ship.adapters.transitions as transitions
from kvbake.ship.adapters import rollout
from kvbake.deployfile import Deployment
from kvbake.errors import DivergedError, RolloutError
from kvbake.ship.core.journal import read_diverged, read_journal, write_journal
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.fleet import Fleet

from kvbake.engines.core.procfs import Process
from fake_fleet import BASE, CONTAINER, CONTROL, OTHER, PACKING, REPO, World, deploy, diverged_deploy, make_world, release

REAL_LAUNCH = transitions.launch  # before the world fixture puts a fake launcher in its place


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def test_a_failed_first_deploy_leaves_the_nodes_as_they_were_and_the_next_deploy_works(world):
    before = world.snapshot()
    world.failing_launch.add("b:control")
    with pytest.raises(RolloutError, match="launcher on b exited 1"):
        deploy(world, CONTROL)
    assert world.snapshot() == before
    assert world.launches == ["a:control", "b:control"], "a first deploy's revert launches nothing"
    world.failing_launch.clear()
    deploy(world, CONTROL)
    assert world.snapshot()["nodes"]["a"]["records"] == (CONTROL.id, None)


def test_a_failed_second_deploy_keeps_previous_as_it_was(world):
    deploy(world, CONTROL)
    before = world.snapshot()
    world.failing_launch.add("b:packing")
    with pytest.raises(RolloutError, match="launcher on b exited 1"):
        deploy(world, PACKING)
    assert world.snapshot() == before
    assert before["nodes"]["a"]["previous"] is None and before["nodes"]["a"]["records"] == (CONTROL.id, None)


def test_redeploying_the_current_release_keeps_the_rollback_target(world):
    deploy(world, CONTROL)
    deploy(world, PACKING)
    deploy(world, PACKING)
    state = world.snapshot()["nodes"]["a"]
    assert state["records"] == (PACKING.id, CONTROL.id) and state["previous"] == CONTROL.config_digest
    rollout.rollback(world.fleet, False)
    assert world.snapshot()["nodes"]["b"]["records"] == (CONTROL.id, PACKING.id)


@pytest.mark.parametrize("sequence, expected", [
    ((CONTROL,), (CONTROL.id, None)),
    ((CONTROL, PACKING), (PACKING.id, CONTROL.id)),
    ((CONTROL, PACKING, OTHER), (OTHER.id, PACKING.id)),
    ((CONTROL, CONTROL), (CONTROL.id, None)),
])
def test_the_rollback_chain(world, sequence, expected):
    for r in sequence:
        deploy(world, r)
    for state in world.snapshot()["nodes"].values():
        assert state["records"] == expected and not state["lock"] and state["transition"] is None


def node_engines_state(w: World) -> dict:
    """Everything each fake node holds but the images a pull by digest adds: tags, containers, state files."""
    import copy

    return {name: (copy.deepcopy({ref: i for ref, i in e.tags.items() if "@sha256:" not in ref}), copy.deepcopy(e.containers),
                   copy.deepcopy(e.files)) for name, e in w.engines.items()}


PHASE_1_FIX = "; fix: deploy the digest push recorded for the locked build (leave --image out); nothing was moved"


@pytest.mark.parametrize(("change", "wrong"), [
    ("labels", "other labels: k"),
    ("extra label", "other labels: org.example.extra"),
    ("layers", "other layers"),
    ("config", "config sha256:000000000000, not the lock's {config}"),
    ("workdir", "other WorkingDir"),
], ids=["labels", "extra label", "layers", "config", "workdir"])
@pytest.mark.parametrize("store", ["classic", "containerd"])
def test_phase_1_refuses_a_pulled_image_unlike_the_release_and_changes_nothing(tmp_path, monkeypatch, store, change, wrong):
    """The registry serves node b an image under the release's digest reference whose labels (changed or one more),
    layers, config digest or runtime config are not the release's: the deploy stops in phase 1, before any tag, lock,
    record or serve moves on either node. On the containerd store the image's Id is its manifest's digest, so only the
    config digest read from the manifest tells a forged config."""
    world = make_world(tmp_path, monkeypatch, store)
    deploy(world, CONTROL)
    pulled = world.engines["b"].registry[PACKING.image]
    if change == "labels":
        pulled["Config"]["Labels"] = {"k": "forged"}
    elif change == "extra label":
        pulled["Config"]["Labels"] = {**pulled["Config"]["Labels"], "org.example.extra": "1"}
    elif change == "layers":
        pulled["RootFS"]["Layers"] = [*BASE, "sha256:thin-forged"]
    elif change == "config":
        pulled["Id"] = "sha256:" + "0" * 64
    else:
        pulled["Config"]["WorkingDir"] = "/opt/shadow"
    before, held = world.snapshot(), node_engines_state(world)
    with pytest.raises(RolloutError) as refused:
        deploy(world, PACKING)
    assert refused.value.exit_code == 12 and refused.value.message.startswith(f"node b: {PACKING.image} is not the release's image")
    assert wrong.format(config=PACKING.config_digest[:19]) in refused.value.message and refused.value.one_line().endswith(PHASE_1_FIX)
    assert world.snapshot() == before and node_engines_state(world) == held
    assert world.launches == ["a:control", "b:control"]


def test_the_plan_is_made_under_the_locks(world, monkeypatch):
    """A second operator's deploy that completes just before this one takes its locks stays in the rollback chain."""
    deploy(world, CONTROL)
    original = rollout.locked

    def other_operator_first(*args, **kwargs):
        monkeypatch.setattr(rollout, "locked", original)
        deploy(world, OTHER)
        return original(*args, **kwargs)

    monkeypatch.setattr(rollout, "locked", other_operator_first)
    deploy(world, PACKING)
    assert world.snapshot()["nodes"]["a"]["records"] == (PACKING.id, OTHER.id)


def test_a_node_keeping_a_journal_stops_another_host_and_any_host_can_revert_it(world, tmp_path):
    deploy(world, CONTROL)
    before = world.snapshot()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "retag", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            deploy(world, PACKING)
    for engine in world.engines.values():
        engine.remove_container("kvbake-lock")  # the first host died; its lock was broken
    other = Fleet(Deployment(tmp_path / "host2" / "deploy.yaml", world.fleet.deployment.nodes, world.fleet.deployment.launcher, 900),
                  world.engines, REPO, ("S",), ("/src/x.py",), "/src")
    with pytest.raises(RolloutError, match=r"node a holds the journal of an interrupted deploy deploy-.* \(release " + PACKING.id):
        rollout.deploy(other, OTHER, "base:1", BASE, False)
    rollout.recover(other, "revert", False)
    assert world.snapshot()["nodes"] == before["nodes"]


def test_a_journal_finished_by_another_host_is_dropped_not_replayed(world, tmp_path):
    deploy(world, CONTROL)
    folder = world.fleet.deployment.state_dir
    held = world.engines["a"].image_id_of(f"{REPO}:current")  # a plan's images are on its node (staged before the plan)
    stale = rollout.Journal("deploy-old", "deploy", PACKING.id, (rollout.NodePlan("a", None, None, held, None, {}, {}),),
                            done=("after:retag:a",), phase="forward")
    write_journal(folder, stale)
    before = world.snapshot()["nodes"]
    with pytest.raises(RolloutError, match="deploy deploy-old was already finished or undone from another operator host"):
        rollout.recover(world.fleet, "revert", False)
    assert read_journal(folder) is None and world.snapshot()["nodes"] == before


@pytest.mark.parametrize("mode", ["revert", "resume"])
def test_a_journal_whose_deploy_never_began_is_dropped_and_never_resumed(world, mode):
    """Killed after this host's journal, before any node kept it and before any step: nothing ran, and its plan is
    stale, so a revert drops it (nothing to undo) and a resume refuses to run it."""
    deploy(world, CONTROL)
    folder = world.fleet.deployment.state_dir
    held = world.engines["a"].image_id_of(f"{REPO}:current")  # a plan's images are on its node (staged before the plan)
    write_journal(folder, rollout.Journal("deploy-new", "deploy", PACKING.id, (rollout.NodePlan("a", None, None, held, None, {}, {}),),
                                          phase="forward"))
    before = world.snapshot()["nodes"]
    if mode == "revert":
        assert rollout.recover(world.fleet, mode, False).phase == "never began"
    else:
        with pytest.raises(RolloutError, match="deploy deploy-new never began .* nothing to resume") as refused:
            rollout.recover(world.fleet, mode, False)
        assert refused.value.exit_code == 12 and "deploy again" in refused.value.fix
    assert read_journal(folder) is None and world.snapshot()["nodes"] == before and world.launches == ["a:control", "b:control"]


def test_a_revert_that_fails_marks_every_reachable_node_diverged(world):
    deploy(world, CONTROL)
    diverged_deploy(world, PACKING)
    assert NodeState("a", world.engines["a"]).read().diverged["repair"].startswith("python build.py deploy --revert")
    assert "kvbake-lock" in world.engines["b"].containers, "b was down when the locks were released"
    world.engines["b"].remove_container("kvbake-lock")  # as --break-lock would
    other = Fleet(Deployment(world.fleet.deployment.path.parent / "h2" / "deploy.yaml", world.fleet.deployment.nodes,
                             world.fleet.deployment.launcher, 900), world.engines, REPO, ("S",), ("/src/x.py",), "/src")
    with pytest.raises(DivergedError, match="node a is marked diverged"):
        rollout.deploy(other, OTHER, "base:1", BASE, False)
    rollout.recover(world.fleet, "revert", False)
    state = world.snapshot()
    assert state["diverged"] is None and state["journal"] is None
    assert {n: (s["records"], s["diverged"], s["transition"]) for n, s in state["nodes"].items()} == {
        n: ((CONTROL.id, None), None, None) for n in ("a", "b")}


def test_damaged_records_are_refused_then_reseated(world):
    deploy(world, CONTROL)
    world.engines["b"].files["kvbake-state"] = {"/kvbake/state-a.json": b"{", "/kvbake/state-b.json": b""}
    with pytest.raises(RolloutError, match="node b: every copy of its state record is corrupt"):
        deploy(world, PACKING)
    with pytest.raises(RolloutError, match="--reseat a: that node's image store did not change"):
        deploy(world, PACKING, reseat=frozenset({"a"}))
    deploy(world, PACKING, reseat=frozenset({"b"}))
    assert world.snapshot()["nodes"]["b"]["records"] == (PACKING.id, None)
    assert f"{REPO}:previous" not in world.engines["b"].tags, "a reseated node keeps a previous tag no record names"
    deploy(world, CONTROL)
    assert world.snapshot()["nodes"]["b"]["records"] == (CONTROL.id, PACKING.id)


def test_launcher_arguments_arrive_whole(world, tmp_path):
    import json
    import shlex

    r = release("args", {}, ("--served-model-name", "my model", "--x='y'"))
    settings = transitions.settings_of_release(r)
    files = transitions.write_rank_files(tmp_path / "a", settings)
    env = transitions.launcher_env(world.fleet, "a", r, settings, files)
    whole = ["--max-model-len", "4096", *r.launcher_args]
    assert shlex.split(env["KVBAKE_LAUNCHER_ARGS"]) == whole
    assert json.loads(env["KVBAKE_LAUNCHER_ARGS_JSON"]) == whole
    assert Path(env["KVBAKE_ARGS_FILE"]).read_text().splitlines()[1:] == whole
    assert Path(env["KVBAKE_ENV_FILE"]).read_text().splitlines()[0].startswith("# kvbake config args: preset sha256 ")
    assert env["DOCKER_HOST"] == "unix:///a" and env["KVBAKE_ROLE"] == "head" and env["KVBAKE_IMAGE"] == f"{REPO}:current"


def with_deployment(world: World, **changes) -> None:
    """The world's fleet with another deployment (start order, readiness)."""
    from dataclasses import replace

    object.__setattr__(world.fleet, "deployment", replace(world.fleet.deployment, **changes))


def test_workers_start_before_the_head(world):
    with_deployment(world, start="workers-first")
    deploy(world, CONTROL)
    assert world.launches == ["b:control", "a:control"]
    assert read_journal(world.fleet.deployment.state_dir) is None


def test_together_starts_every_rank_at_once(world, monkeypatch):
    """Each fake launcher waits for the other: run one after another, they would never both return."""
    import threading

    with_deployment(world, start="together")
    both = threading.Barrier(2, timeout=10)
    fake = transitions.launch

    def meet_then_launch(fleet, name, rel):
        both.wait()
        fake(fleet, name, rel)

    monkeypatch.setattr(transitions, "launch", meet_then_launch)
    deploy(world, CONTROL)
    assert sorted(world.launches) == ["a:control", "b:control"]


def test_a_serve_that_never_gets_ready_reverts_every_node(world, monkeypatch):
    from kvbake.deployfile import Readiness

    deploy(world, CONTROL)
    with_deployment(world, readiness=Readiness("http://127.0.0.1:9/health", 200, 30, 1))
    before = world.snapshot()
    waits = []

    def ready_only_for_control(readiness, dead_rank, **kw):
        serving = world.engines["a"].containers[CONTAINER]["Config"]["Env"]
        waits.append(tuple(serving))
        if serving:
            raise RolloutError("the serve never became ready: GET http://127.0.0.1:9/health answered 503", "every node was reverted")
        return 0.0

    monkeypatch.setattr(transitions, "wait_until_ready", ready_only_for_control)
    with pytest.raises(RolloutError) as caught:
        deploy(world, PACKING)
    assert caught.value.exit_code == 12
    assert "never became ready" in caught.value.message
    assert world.snapshot() == before
    assert waits == [("S=3",), ()], "the forward side and the revert each wait for readiness"


def test_a_rank_that_dies_before_it_is_ready_ends_the_wait_and_reverts(world, monkeypatch):
    import functools

    import httpx

    from kvbake.deployfile import Readiness

    deploy(world, CONTROL)
    with_deployment(world, readiness=Readiness("http://127.0.0.1:9/health", 200, 600, 0.05))
    before = world.snapshot()
    fake = transitions.launch

    def crash_on_b_with_packing(fleet, name, rel):
        fake(fleet, name, rel)
        if name == "b" and rel.preset == "packing":
            container = world.engines["b"].containers[CONTAINER]
            container["State"] = {"Running": False, "ExitCode": 1}
            container["Log"] = ["ValueError: VLLM_X=3 is not supported"]

    healthy = httpx.MockTransport(lambda request: httpx.Response(200 if "S=3" not in world.engines["a"].containers[CONTAINER]["Config"]["Env"] else 503))
    monkeypatch.setattr(transitions, "launch", crash_on_b_with_packing)
    monkeypatch.setattr(transitions, "wait_until_ready", functools.partial(transitions.wait_until_ready, transport=healthy))
    with pytest.raises(RolloutError) as caught:
        deploy(world, PACKING)
    assert caught.value.exit_code == 12
    assert all(field in caught.value.message for field in ("died before it was ready", "serve on b", "exit code 1", "VLLM_X=3"))
    assert world.snapshot() == before


def test_a_launcher_that_exits_0_but_starts_nothing_is_a_failed_step(world, tmp_path):
    """The real restart: the launcher runs (here `true`) and must leave a running serving container."""
    from kvbake.deployfile import Launcher

    with_deployment(world, launcher=Launcher(("true",), CONTAINER, 10))
    with pytest.raises(RolloutError) as absent:
        REAL_LAUNCH(world.fleet, "a", CONTROL)
    assert absent.value.exit_code == 12
    assert all(field in absent.value.message for field in ("launcher on a", "exited 0", "serving container serve", "does not exist"))
    assert "$KVBAKE_CONTAINER" in absent.value.fix
    world.engines["a"].containers[CONTAINER] = {"Name": CONTAINER, "State": {"Running": False, "ExitCode": 3}, "Log": ["bye"]}
    with pytest.raises(RolloutError) as stopped:
        REAL_LAUNCH(world.fleet, "a", CONTROL)
    assert stopped.value.exit_code == 12
    assert all(field in stopped.value.message for field in ("launcher on a", "serve on a", "not running", "exit code 3: bye"))
    world.engines["a"].run_serving(CONTAINER, "base:1", [])
    with pytest.raises(RolloutError) as old:
        REAL_LAUNCH(world.fleet, "a", CONTROL)
    assert old.value.exit_code == 12
    assert all(field in old.value.message for field in ("launcher on a", "serve on a", "still the old one", "not recreated"))


@pytest.mark.parametrize(("fault", "caught"), [
    ("switch", "b: pid 1: switch S is 9, expected 3"),
    ("image", "b: the container runs image sha256:base"),
    ("length", "b: pid 1: --max-model-len is 2048 in its command line, not 4096"),
    ("PYTHONPATH", "b: pid 1: PYTHONPATH='/opt/shadow' in its environment"),
    ("PYTHONPATH", "b: pid 1: imports vllm from /opt/shadow/vllm/__init__.py"),
    ("mount", "b: a bind mount at /src covers baked file /src/x.py"),
    ("crash", "launcher on b exited 0 but the serving container serve on b is not running (exit code 1"),
], ids=["switch", "image", "length", "PYTHONPATH", "PYTHONPATH-import", "mount", "crash"])
def test_a_rank_its_launcher_built_wrong_is_caught_and_every_node_reverted(world, fault, caught):
    """b's launcher exits 0 but builds its rank wrong in one way (as a real launcher might); the rollout reads the rank
    (its container, image and serve processes), names what is wrong and walks every node back to the release before,
    whose ranks it launches again."""
    deploy(world, CONTROL)
    before, serving = world.snapshot(), {name: e.containers[CONTAINER]["State"]["Running"] for name, e in world.engines.items()}
    world.wrong_launch["b:packing"] = fault
    with pytest.raises(RolloutError) as refused:
        deploy(world, PACKING)
    assert refused.value.exit_code == 12 and caught in refused.value.message
    assert world.snapshot() == before and world.launches[-2:] == ["a:control", "b:control"]
    assert {name: e.containers[CONTAINER]["State"]["Running"] for name, e in world.engines.items()} == serving == {"a": True, "b": True}


def test_a_switch_the_release_leaves_unset_is_caught_and_the_first_deploy_undone(world):
    before = world.snapshot()
    world.wrong_launch["b:control"] = "switch"
    with pytest.raises(RolloutError) as refused:
        deploy(world, CONTROL)
    assert refused.value.exit_code == 12 and "b: pid 1: switch S is 9, expected unset" in refused.value.message
    assert world.snapshot() == before


def test_the_launchers_clean_rank_passes(world):
    """The same launcher, building each rank as it was told, passes verify on every rank."""
    deploy(world, CONTROL)
    world.wrong_launch["b:packing"] = "clean"
    deploy(world, PACKING)
    assert {node["records"] for node in world.snapshot()["nodes"].values()} == {(PACKING.id, CONTROL.id)}


def test_a_serving_container_that_restarted_counts_as_dead(world):
    """A crash under `--restart unless-stopped` shows as running again a moment later; its restart count gives it away."""
    world.engines["a"].run_serving(CONTAINER, "base:1", [])
    world.engines["a"].containers[CONTAINER].update(RestartCount=2, State={"Running": True, "ExitCode": 1}, Log=["boom"])
    assert transitions.not_running(world.fleet, "a") == "the serving container serve on a keeps restarting (exit code 1: boom)"
    world.engines["a"].containers[CONTAINER].update(RestartCount=0, State={"Running": True, "Restarting": False})
    assert transitions.not_running(world.fleet, "a") is None


@pytest.mark.parametrize("state, count", [({"Running": True}, 1), ({"Running": False, "Restarting": True}, 3)])
def test_the_adopted_serve_restarted_by_its_own_policy_is_alive_until_it_stops_for_good(world, state, count):
    """An old Ray worker brought back restarts under its own policy until its head answers: no dead rank, unless it
    stopped (its policy gave up)."""
    world.engines["a"].run_serving(CONTAINER, "base:1", [])
    world.engines["a"].containers[CONTAINER].update(RestartCount=count, State={**state, "ExitCode": 1}, Log=["no head yet"])
    assert transitions.not_running(world.fleet, "a", own_policy=True) is None
    assert transitions.not_running(world.fleet, "a") == "the serving container serve on a keeps restarting (exit code 1: no head yet)"
    world.engines["a"].containers[CONTAINER].update(State={"Running": False, "Restarting": False, "ExitCode": 1})
    assert transitions.not_running(world.fleet, "a", own_policy=True) == \
        "the serving container serve on a keeps restarting (exit code 1: no head yet)"


def start_unadopted_serve(world: World) -> dict[str, str]:
    """The serve each node runs without kvbake: the base image, one switch set by hand."""
    ids = {}
    for name, engine in world.engines.items():
        engine.run_serving(CONTAINER, "base:1", ["S=3"])
        ids[name] = engine.containers[CONTAINER]["Id"]
    return ids


def test_a_deploy_over_a_serve_kvbake_did_not_deploy_is_refused_until_it_is_adopted(world):
    from kvbake.ship.adapters.adoption import adopt

    ids = start_unadopted_serve(world)
    before = world.snapshot()
    with pytest.raises(RolloutError) as caught:
        deploy(world, CONTROL)
    assert caught.value.exit_code == 12
    assert all(field in caught.value.message for field in ("node a", "did not deploy", "container a-1"))
    assert "build.py adopt" in caught.value.fix
    assert world.snapshot() == before and world.launches == []
    adopted = adopt(world.fleet, "the bind-mount serve", False)
    assert {n: r.adopted["container_id"] for n, r in adopted.items()} == ids
    assert {r.preset for r in adopted.values()} == {"adopted"} and adopted["a"].switches == {"S": "3"}
    assert world.snapshot()["nodes"]["a"]["records"] == (adopted["a"].id, None)


def test_the_first_deploy_keeps_the_adopted_container_and_rollback_brings_it_back(world):
    from kvbake.ship.adapters.adoption import adopt

    ids = start_unadopted_serve(world)
    adopt(world.fleet, "seed serve", False)
    deploy(world, CONTROL)
    for name, engine in world.engines.items():
        kept = engine.containers[f"{CONTAINER}-kvbake-adopted"]
        assert kept["Id"] == ids[name] and not kept["State"]["Running"]
    rollout.rollback(world.fleet, False)
    for name, engine in world.engines.items():
        assert engine.containers[CONTAINER]["Id"] == ids[name] and engine.containers[CONTAINER]["State"]["Running"]
        assert f"{CONTAINER}-kvbake-adopted" not in engine.containers
    rollout.rollback(world.fleet, False)
    deploy(world, PACKING)
    for name, engine in world.engines.items():
        assert engine.containers[f"{CONTAINER}-kvbake-adopted"]["Id"] == ids[name], "out of the chain, still restorable"
        assert NodeState(name, engine).read().adopted.adopted["container_id"] == ids[name]


def test_a_failed_first_deploy_after_adopt_restores_the_adopted_serve(world):
    from kvbake.ship.adapters.adoption import adopt

    ids = start_unadopted_serve(world)
    adopt(world.fleet, "seed serve", False)
    before = world.snapshot()
    world.failing_launch.add("b:control")
    with pytest.raises(RolloutError, match="launcher on b exited 1"):
        deploy(world, CONTROL)
    assert world.snapshot() == before
    assert {name: engine.containers[CONTAINER]["Id"] for name, engine in world.engines.items()} == ids
    assert all(NodeState(name, engine).read().adopted for name, engine in world.engines.items())  # still restorable


@pytest.mark.parametrize(("change", "named", "fix_names"), [
    ("no serve on b", ("b runs no serve", "container serve"), "running serve"),
    ("no serve anywhere", ("a, b run no serve", "container serve"), "running serve"),
    ("no vllm on b", ("no vLLM serve", "in b", "sleep infinity"), "start vLLM"),
    ("another length on b", ("different serves", "max-model-len 4096", "max-model-len 8192"), None),
    ("another switch on b", ("different serves", "{'S': '3'}, max-model-len 4096; b: ", "{'S': '1'}"), "one image and one switch set"),
    ("no switch on b", ("different serves", "{'S': '3'}, max-model-len 4096; b: ", "with no switches, max-model-len"), "one switch set"),
    ("a release on a", ("a (", "already runs a kvbake release"), "did not deploy"),
    ("a release on both", (f"a ({CONTROL.id}), b ({CONTROL.id}) already run a kvbake release",), "did not deploy"),
])
def test_adopt_refuses_and_changes_nothing(world, change, named, fix_names):
    from kvbake.ship.adapters.adoption import adopt

    start_unadopted_serve(world)
    if change.startswith("no serve"):
        for name in ("b",) if change.endswith("on b") else ("a", "b"):
            world.engines[name].remove_container(CONTAINER)
    elif change.startswith("a release"):
        for name in ("a",) if change.endswith("on a") else ("a", "b"):
            NodeState(name, world.engines[name]).update("base:1", "seeded", current=CONTROL)
    elif change == "no vllm on b":
        world.engines["b"].containers[CONTAINER]["Processes"] = (Process(1, 0, ("sleep", "infinity"), {}, "/", "/bin/sleep"),)
    elif change == "another length on b":
        world.engines["b"].run_serving(CONTAINER, "base:1", ["S=3"], ("--max-model-len", "8192"))
    elif change == "no switch on b":
        world.engines["b"].run_serving(CONTAINER, "base:1", [])
    else:
        world.engines["b"].run_serving(CONTAINER, "base:1", ["S=1"])
    before = world.snapshot()
    with pytest.raises(RolloutError) as caught:
        adopt(world.fleet, "x", False)
    assert caught.value.exit_code == 12
    assert caught.value.message.startswith("adopt: ")
    assert all(field in caught.value.message for field in named), caught.value.message
    assert fix_names is None or fix_names in caught.value.fix
    assert world.snapshot() == before


@pytest.mark.parametrize("lost_on", [("b",), ("a", "b")], ids=["one node", "every node"])
def test_status_never_shows_as_current_a_release_whose_image_is_gone(world, lost_on):
    """A node records PACKING as current but its `:current` tag (and so the image) is gone: status shows no current
    release there, says the recorded one is missing, and calls the deployment diverged, even when every node lost it."""
    from kvbake.ship.adapters.status import status, status_table

    deploy(world, CONTROL)
    deploy(world, PACKING)
    for name in lost_on:
        world.engines[name].untag(f"{REPO}:current")
    data = status(world.fleet)
    rows = {row["node"]: row for row in data["nodes"]}
    for name, row in rows.items():
        lost = name in lost_on
        assert row["current"] is None if lost else row["current"]["id"] == PACKING.id
        assert row["recorded_current_missing"] is lost and row["running_matches_current"] is not lost
        assert row["previous"]["id"] == CONTROL.id
    assert data["diverged"] is True and data["marked_diverged"] is None and data["pending_journal"] is None
    lines = status_table(data).splitlines()
    for name in lost_on:
        assert next(line for line in lines if line.startswith(name + " ")).split()[2] == "-"
    assert lines[-1] == "DIVERGED: the ranks do not agree"


# -- credentials: nothing that looks like one is written to a node, the journal or the diverged mark ---------------

GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5" * 3 + "f6G7h8"
HF_TOKEN = "hf_" + "AbCdEfGhIj" * 3 + "kLmN"
SCAN_FIX = "fix: remove it at its source (use a credential helper or git config, never a URL or a label)"


def everything_written(w: World) -> bytes:
    """Every byte kvbake wrote: each node's state files and this host's state folder."""
    nodes = b"".join(data for e in w.engines.values() for files in e.files.values() for data in files.values())
    folder = w.fleet.deployment.state_dir
    local = b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()) if folder.exists() else b""
    return nodes + local


def test_a_release_whose_reason_holds_a_token_is_refused_before_anything_is_pulled(world):
    from dataclasses import replace

    from kvbake.errors import IntegrityError

    deploy(world, CONTROL)
    before, held = world.snapshot(), node_engines_state(world)
    images = {name: dict(e.images) for name, e in world.engines.items()}
    leaky = replace(PACKING, reason=f"window {GITHUB_TOKEN}")
    with pytest.raises(IntegrityError) as refused:
        deploy(world, leaky)
    assert refused.value.one_line() == (f"release {leaky.id}: reason (a GitHub token) looks like a credential and would be written in "
                                        f"clear; {SCAN_FIX}")
    assert world.snapshot() == before and node_engines_state(world) == held
    assert {name: dict(e.images) for name, e in world.engines.items()} == images, "nothing was pulled"
    assert GITHUB_TOKEN.encode() not in everything_written(world)


def test_a_token_in_a_record_an_earlier_kvbake_wrote_is_withheld_when_copied_and_never_stops_a_transition(world):
    """Each node's current record holds a token in its reason (an earlier kvbake accepted it). The next deploy copies
    that record into the journal and into `previous`: it proceeds, and every copy holds a note instead of the token;
    the rollback after it too."""
    from dataclasses import replace as replaced

    from kvbake.ship.core.noderecords import encode
    from kvbake.secretscan import withheld

    deploy(world, CONTROL)
    for name, engine in world.engines.items():
        records = NodeState(name, engine).read()
        legacy = replaced(records, current=replaced(records.current, reason=f"old {GITHUB_TOKEN}"))
        engine.files["kvbake-state"]["/kvbake/" + records.slot] = encode(legacy, records.seq)
    journals, written = [], []

    def write_and_read_back(folder, journal):
        write_journal(folder, journal)
        journals.append(journal)
        written.append((folder / "journal.json").read_bytes())

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transitions, "write_journal", write_and_read_back)
        deploy(world, PACKING)
    assert journals and GITHUB_TOKEN in str(journals[0]), "the plan itself carried the token"
    assert all(GITHUB_TOKEN.encode() not in data and withheld("a GitHub token").encode() in data for data in written)
    for name, engine in world.engines.items():
        records = NodeState(name, engine).read()
        assert (records.current.id, records.previous.id) == (PACKING.id, CONTROL.id)
        assert records.previous.reason == withheld("a GitHub token")
    assert GITHUB_TOKEN.encode() not in everything_written(world)
    rollout.rollback(world.fleet, False)
    assert NodeState("a", world.engines["a"]).read().current.reason == withheld("a GitHub token")
    assert GITHUB_TOKEN.encode() not in everything_written(world)


def test_a_diverged_mark_is_written_with_a_credential_like_cause_withheld(world, monkeypatch):
    """The forward step fails with a launcher line that holds a token and the revert fails too: the deployment is
    marked diverged here and on every node, with that cause withheld, never lost and never in clear."""
    from kvbake.secretscan import withheld

    deploy(world, CONTROL)
    fake = transitions.launch

    def leaky_then_busy(fleet, name, rel):
        if name == "b" and rel.preset == "packing":
            raise RolloutError(f"launcher on b exited 1 (HF_TOKEN={HF_TOKEN} was rejected)", "fix the launcher")
        if name == "b" and world.engines["b"].image_id_of(f"{REPO}:current") == CONTROL.config_digest and world.launches[-1:] == ["a:control"]:
            raise RolloutError("launcher on b exited 1 (GPU busy)", "fix the launcher")
        fake(fleet, name, rel)

    monkeypatch.setattr(transitions, "launch", leaky_then_busy)
    with pytest.raises(DivergedError):
        deploy(world, PACKING)
    note = withheld("a Hugging Face token")
    local = read_diverged(world.fleet.deployment.state_dir)
    assert local["cause"] == note and local["revert_error"] == "launcher on b exited 1 (GPU busy); fix: fix the launcher"
    for name, engine in world.engines.items():
        assert NodeState(name, engine).read().diverged["cause"] == note, name
    assert HF_TOKEN.encode() not in everything_written(world)


def test_adopt_refuses_a_credential_in_its_reason_or_in_the_adopted_images_record(world):
    from kvbake.ship.adapters.adoption import adopt
    from kvbake.errors import IntegrityError

    start_unadopted_serve(world)
    before = world.snapshot()
    with pytest.raises(IntegrityError) as refused:
        adopt(world.fleet, f"seed serve {GITHUB_TOKEN}", False)
    assert refused.value.one_line() == ("--reason holds a GitHub token, which would be written in clear into the release records, every "
                                        "node's state, the journal, configs and reports; fix: give the reason without the credential; "
                                        "nothing was written")
    for engine in world.engines.values():
        engine.images["sha256:base"]["Config"]["Labels"] = {"org.opencontainers.image.source": "https://ops:hunter22@git.example/x.git"}
    with pytest.raises(IntegrityError) as refused:
        adopt(world.fleet, "seed serve", False)
    assert refused.value.one_line() == ("adopt: the release record of a: labels.org.opencontainers.image.source (URL userinfo) looks like a "
                                        f"credential and would be written in clear; {SCAN_FIX}")
    assert world.snapshot() == before and b"hunter22" not in everything_written(world)
