"""One GPU node, one serve: a vLLM serve kvbake does not account for (an old launcher's, a container recreated by hand)
stops deploy and rollback before anything moves and fails verify-running, each naming the node and the container."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.engines.core.procfs import Process
from kvbake.errors import EngineError, IntegrityError, RolloutError
from kvbake.ship.adapters import rollout
from kvbake.ship.adapters.other_serves import other_serves, serving_containers
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.adapters.status import verify_running

from fake_fleet import CONTROL, PACKING, World, deploy, make_world


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def second_serve(world: World, node: str, name: str = "old-launcher-serve") -> None:
    """Another container on the node serving vLLM from the base, as an old launcher would start it."""
    world.engines[node].run_serving(name, "base:1", [], ("--max-model-len", "4096"))


def test_containers_are_serving_only_when_a_process_of_theirs_is_a_vllm_serve(world):
    deploy(world, CONTROL)
    engine = world.engines["a"]
    engine.run_serving("sidecar", "base:1", [], main=("sleep", "infinity"))
    engine.containers["sidecar"]["Processes"] = engine.containers["sidecar"]["Processes"][:1]
    assert set(serving_containers(engine).values()) == {"serve"}
    second_serve(world, "a")
    assert set(serving_containers(engine).values()) == {"serve", "old-launcher-serve"}
    assert other_serves(world.fleet, "a", NodeState("a", engine).read()) == ["old-launcher-serve"]
    assert other_serves(world.fleet, "b", NodeState("b", world.engines["b"]).read()) == []


def without_python3(engine, name: str, monkeypatch) -> None:
    """The process probe fails in the container `name`, as it does where there is no python3."""
    real = engine.processes

    def probe(container: str):
        if engine._name_of(container) == name:
            raise EngineError(f"a: reading its processes in {name} failed (exec: python3: not found)", "x")
        return real(container)

    monkeypatch.setattr(engine, "processes", probe)


def test_a_second_serve_in_a_container_without_python3_is_read_through_docker_top_and_refused(world, monkeypatch):
    deploy(world, CONTROL)
    second_serve(world, "b", "no-python")
    engine = world.engines["b"]
    without_python3(engine, "no-python", monkeypatch)
    assert set(serving_containers(engine).values()) == {"serve", "no-python"}
    engine.containers["no-python"]["Processes"] = (Process(1, 0, ("sleep", "infinity"), {}, "/", "/bin/sleep"),)
    assert set(serving_containers(engine).values()) == {"serve"}  # docker top shows no serve there: none runs
    second_serve(world, "b", "no-python")
    before = world.snapshot()
    with pytest.raises(RolloutError, match=r"node b runs another vLLM serve in no-python \(neither kvbake's"):
        deploy(world, PACKING)
    assert world.snapshot() == before


def test_a_container_neither_the_probe_nor_docker_top_can_read_is_named_not_passed_over(world, monkeypatch):
    second_serve(world, "a", "unreadable")
    engine = world.engines["a"]
    without_python3(engine, "unreadable", monkeypatch)
    real_top = engine.top

    def top(container: str):
        if engine._name_of(container) == "unreadable":
            raise EngineError("a: top of unreadable failed (container is restarting)", "x")
        return real_top(container)

    monkeypatch.setattr(engine, "top", top)
    with pytest.raises(EngineError) as unread:
        serving_containers(engine)
    assert unread.value.message.startswith("could not read unreadable: a: reading its processes in unreadable failed")
    assert "top of unreadable failed (container is restarting)" in unread.value.message


def test_deploy_and_rollback_refuse_a_second_serve_before_anything_moves(world):
    deploy(world, CONTROL)
    deploy(world, PACKING)
    second_serve(world, "b")
    before = world.snapshot()
    with pytest.raises(RolloutError, match=r"node b runs another vLLM serve in old-launcher-serve \(neither kvbake's nor the adopted "
                                           r"one\): a second serve on one GPU node"):
        deploy(world, CONTROL)
    with pytest.raises(RolloutError, match="node b runs another vLLM serve in old-launcher-serve"):
        rollout.rollback(world.fleet, False)
    assert world.snapshot() == before and world.launches == ["a:control", "b:control", "a:packing", "b:packing"]


def test_verify_running_fails_naming_the_second_serve(world):
    deploy(world, CONTROL)
    assert [r.node for r in verify_running(world.fleet, None)] == ["a", "b"]
    second_serve(world, "a")
    with pytest.raises(IntegrityError, match=r"a: a second vLLM serve runs in old-launcher-serve \(neither kvbake's nor the adopted one\)"):
        verify_running(world.fleet, None)


def test_a_serve_recreated_by_hand_after_adopt_is_not_the_adopted_one_and_is_refused(world):
    from kvbake.ship.adapters.adoption import adopt

    for node in ("a", "b"):
        world.engines[node].run_serving("serve", "base:1", [], ("--max-model-len", "4096"))
    adopt(world.fleet, "adopt", False)
    for node in ("a", "b"):  # the operator recreates the serve by hand, under the same name, with other settings
        world.engines[node].remove_container("serve")
        world.engines[node].run_serving("serve", "base:1", ["EXTRA=1"], ("--max-model-len", "4096"))
    before = world.snapshot()
    with pytest.raises(RolloutError, match=r"node a runs another vLLM serve in serve \(neither kvbake's nor the adopted one\)"):
        deploy(world, CONTROL)
    assert world.snapshot() == before
