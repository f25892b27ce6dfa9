"""What adopt records beyond the serve's own command line: how to exec its Ray node again (with only the environment
the container does not set itself), and the sha256 of each file it found changed under the source root, read from the
running container, so that a later edit of one is named by the process check. Its refusals of a second serve in a
container, and of a start-up hook the image does not hold, name adopt."""

from __future__ import annotations


import pytest

from kvbake.errors import IntegrityError, RolloutError
from kvbake.ship.adapters.adoption import adopt
from kvbake.ship.adapters.status import verify_running

from fake_fleet import CONTAINER, SOURCE_ROOT, SWITCH, World, start_serves
from helpers_manifest import sha
from test_adoption import world  # noqa: F401  (a fixture)
from test_fleet_adopted_survivors import HOOK, hook_in_the_layer

RAYLET = ["/usr/local/lib/python3.11/dist-packages/ray/core/src/ray/raylet/raylet", "--node_ip_address=127.0.0.1",
          "--static_resource_list=CPU,2,GPU,1.0", "--gcs-address=127.0.0.1:6379"]
RAY_START = ["ray", "start", "--address=127.0.0.1:6379", "--node-ip-address=127.0.0.1", "--num-cpus=2", "--num-gpus=1"]
CHANGED = f"{SOURCE_ROOT}/vllm/mod.py"
DELETED = f"{SOURCE_ROOT}/vllm/old.py"


def start_execd_ray_cluster(world: World) -> None:
    """eugr's shape with Ray: `sleep infinity` as the main process in a container given the switch on each node, a Ray
    node started by docker exec on each node with a variable of its own (only its raylet stays to show it), and vLLM
    exec'd on the head only."""
    for node, engine in world.engines.items():
        engine.run_serving(CONTAINER, "base:1", ["LANG=C", f"{SWITCH}=3"], main=("sleep", "infinity"), host={"RestartPolicy": {"Name": "no"}})
        found = engine.containers[CONTAINER]
        found["Processes"] = found["Processes"][:1]
        engine.exec_detached(CONTAINER, RAYLET, {"RAY_ROLE": node}, "/ray", "1000")
        if node == "a":
            engine.exec_detached(CONTAINER, ["vllm", "serve", "/models/m", "--max-model-len", "4096", "--distributed-executor-backend", "ray"],
                                 {SWITCH: "3"}, "/", "0")


def test_an_execd_ray_node_is_recorded_with_only_the_environment_the_container_does_not_set(world):
    start_execd_ray_cluster(world)
    releases = adopt(world.fleet, "ray by exec", False)
    for node, release in releases.items():
        ray = release.adopted["ray_exec"]
        assert (ray["argv"], ray["env"], ray["cwd"], ray["user"]) == (RAY_START, {"RAY_ROLE": node}, "/ray", "1000")


def test_each_changed_file_is_recorded_by_its_content_and_a_later_edit_is_named(world):
    start_serves(world)
    for engine in world.engines.values():
        engine.containers[CONTAINER]["Changes"] = {CHANGED: "C", DELETED: "D"}
        engine.files.setdefault(CONTAINER, {})[CHANGED] = b"modded\n"
    releases = adopt(world.fleet, "modded serve", False)
    assert {node: r.adopted["change_sha256"] for node, r in releases.items()} == {n: {CHANGED: sha(b"modded\n")} for n in world.engines}
    assert [r.node for r in verify_running(world.fleet, None)] == ["a", "b"]
    world.engines["b"].files[CONTAINER][CHANGED] = b"copied over again\n"
    with pytest.raises(Exception) as caught:
        verify_running(world.fleet, None)
    assert f"b: {CHANGED} was edited in the adopted serve's container after adopt" in str(caught.value)


def test_a_second_serve_in_a_container_is_refused_as_adopt_s_refusal(world):
    start_serves(world)
    world.engines["b"].exec_detached(CONTAINER, ["vllm", "serve", "/models/other"], {}, "/", "0")
    with pytest.raises(RolloutError) as caught:
        adopt(world.fleet, "two serves", False)
    assert str(caught.value).startswith("adopt: b: ") and "then run adopt again; nothing was changed" in str(caught.value)


def test_a_start_up_hook_the_image_does_not_hold_is_refused_as_adopt_s_refusal(world):
    start_serves(world)
    hook_in_the_layer(world.engines["a"])
    with pytest.raises(IntegrityError) as caught:
        adopt(world.fleet, "hooked serve", False)
    assert str(caught.value).startswith(f"adopt: a: its interpreter runs the start-up hook {HOOK}")
