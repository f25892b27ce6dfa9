"""The parts of init's serve description, one by one: shared-memory sizes, the Ray head's port, the image reference,
the head among the ranks, control's arguments, the base pin, mounts, devices, the environment split, and what each
refusal tells the operator to do."""

from __future__ import annotations

import pytest

from kvbake.engines.core.procfs import Process
from kvbake.errors import IntegrityError, RolloutError
from kvbake.serve.core.serve_description import (NodeServe, addresses_of, base_pin, choose_container, classify_mounts, control_args, describe,
                                                device_text, find_drafter, head_of, node_launch, ray_port_of, reference_of, refuse_second_serves,
                                                require_serving,
                                                serve_env, shm_text, split_env)
from kvbake.serve.core.serve_reading import read_serve, second_serves
from kvbake.serve.core.vllm_argv import parse_serve_args

ROOT = "/usr/local/lib/python3.12/dist-packages"
IMAGE_A, IMAGE_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def serve_node(name: str, *args: str, image_id: str = IMAGE_A, config_image: str | None = "spark:v5", env: dict | None = None,
               mounts: tuple = (), host_config: dict | None = None, extra: tuple = ()) -> NodeServe:
    argv = ("python3", "/usr/local/bin/vllm", "serve", "/models/m", *args)
    processes = [Process(1, 0, argv, dict(env or {}), "/", "/usr/bin/python3", 0), *extra]
    reading = read_serve(processes)
    container = {"Name": f"/{name}-serve", "Image": image_id, "Config": {"Image": config_image} if config_image else {},
                 "Mounts": list(mounts), "HostConfig": host_config or {}}
    return NodeServe(name, f"ssh://{name}", container, reading.serving[0] if reading.serving else None, {"RepoDigests": [], "Config": {"Env": []}})


@pytest.mark.parametrize(("size", "text"), [
    (16 * 1024 ** 3, "16g"), (32 * 1024 ** 2, "32m"), (3 * 1024, "3k"), (1025, "1025"), (1, "1"),
    (64 * 1024 ** 2, ""), (0, ""), (-1, ""), (None, ""), ("16g", ""), (64 * 1024 ** 3, "64g"), (65 * 1024 ** 2, "65m"),
])
def test_shared_memory_is_written_in_the_largest_whole_unit_and_the_engines_default_is_left_out(size, text):
    assert shm_text(size) == text


@pytest.mark.parametrize(("argv", "port"), [
    (("ray", "start", "--head", "--port=6380"), "6380"), (("ray", "start", "--head", "--port", "6381", "--block"), "6381"),
    (("ray", "start", "--head", "--port=a=b"), "a=b"), (("ray", "start", "--head", "--port"), ""), (("ray", "start", "--head"), ""),
    (("ray", "start", "--port", "7000"), "7000"),
])
def test_the_ray_heads_port_is_read_in_either_form(argv, port):
    assert ray_port_of(argv) == port


@pytest.mark.parametrize(("config_image", "reference"), [
    ("spark", "spark:latest"), ("reg:5000/team/spark", "reg:5000/team/spark:latest"), ("reg:5000/spark:v5", "reg:5000/spark:v5"),
    ("reg/spark@sha256:" + "d" * 64, "reg/spark@sha256:" + "d" * 64), (None, IMAGE_A),
])
def test_the_reference_is_what_the_container_was_created_from_with_latest_when_untagged(config_image, reference):
    assert reference_of(serve_node("a", config_image=config_image)) == reference


def test_the_head_is_the_one_serve_without_headless_and_none_or_two_are_refused():
    head, worker = serve_node("a", "--max-model-len", "8"), serve_node("b", "--max-model-len", "8", "--headless")
    assert head_of([worker, head]) is head
    with pytest.raises(RolloutError) as failure:
        head_of([worker])
    assert failure.value.message.endswith("found none") and failure.value.fix.startswith("run init while the pair serves")
    assert failure.value.fix.endswith("the head's vLLM serve and each worker's headless serve or Ray node")
    with pytest.raises(RolloutError) as failure:
        head_of([head, serve_node("c", "--max-model-len", "8")])
    assert failure.value.message.endswith("found a, c")


def test_a_node_with_two_serves_keeps_the_first_and_one_with_none_is_refused_with_the_restart_fix():
    reading = read_serve([Process(7, 0, ("vllm", "serve", "/m1"), {}, "/", "/x", 0), Process(9, 0, ("vllm", "serve", "/m2"), {}, "/", "/x", 0)])
    assert require_serving("a", reading.serving, cluster=False).process.pid == 7
    with pytest.raises(IntegrityError) as failure:
        require_serving("a", (), cluster=False)
    assert "runs no vLLM serve" in failure.value.message and failure.value.fix.startswith("start vLLM in it again")


def test_a_container_that_runs_two_serves_is_refused_naming_each_by_pid_and_model_and_one_serve_passes():
    two = read_serve([Process(7, 0, ("vllm", "serve", "/m1"), {}, "/", "/x", 0), Process(9, 0, ("vllm", "serve", "/m2"), {}, "/", "/x", 0)])
    one = read_serve([Process(7, 0, ("vllm", "serve", "/m1"), {}, "/", "/x", 0), Process(8, 7, ("vllm", "serve", "/m1"), {}, "/", "/x", 0)])
    assert second_serves(one) is None and second_serves(read_serve([])) is None, "a serve's own children are no second serve"
    refuse_second_serves("adopt", {"a": one})
    with pytest.raises(RolloutError) as failure:
        refuse_second_serves("adopt", {"a": one, "b": two})
    assert all(field in failure.value.message for field in ("adopt: b:", "2 vLLM serves", "pid 7 (/m1), pid 9 (/m2)", "one serve per GPU node"))
    assert failure.value.fix.endswith("then run adopt again; nothing was changed")


def test_two_candidate_containers_are_named_in_order():
    with pytest.raises(RolloutError) as failure:
        choose_container("a", ["z-serve", "b-serve"], [])
    assert "(b-serve, z-serve)" in failure.value.message and "--container a=NAME" in failure.value.fix
    with pytest.raises(RolloutError) as failure:
        choose_container("a", [], [])
    assert failure.value.fix.startswith("start the serve there first") and failure.value.fix.endswith("with --container")


def test_control_takes_the_length_given_or_none_and_needs_ranks_that_agree():
    assert control_args(serve_node("a", "--port", "8000"), []) == (0, ("--port", "8000")), "no length: init asks the API"
    with pytest.raises(RolloutError) as failure:
        control_args(serve_node("a", "--max-model-len", "32k"), [])
    assert "gives --max-model-len 32k" in failure.value.message and failure.value.fix.startswith("start the serve with --max-model-len N")
    head = serve_node("a", "--max-model-len", "8", "--port", "8000")
    with pytest.raises(RolloutError) as failure:
        control_args(head, [head, serve_node("b", "--max-model-len", "16", "--port", "8000", "--headless")])
    assert "--max-model-len differs between a and b" in failure.value.message
    assert failure.value.fix.startswith("give every rank the same --max-model-len")
    with pytest.raises(RolloutError) as failure:
        control_args(head, [head, serve_node("b", "--max-model-len", "8", "--port", "9000", "--headless")])
    assert "(b vs a: --port)" in failure.value.message and failure.value.fix.startswith("give every rank the same vLLM arguments")
    with pytest.raises(RolloutError) as failure:
        control_args(head, [head, serve_node("b", "--max-model-len", "8", "--port", "8000", "--headless", "--new-thing")])
    assert "(b vs a: --new-thing)" in failure.value.message
    unknown_first = serve_node("a", "--max-model-len", "8", "--x-new", "1", "--y-new", "2")
    with pytest.raises(RolloutError) as failure:
        control_args(unknown_first, [unknown_first, serve_node("b", "--max-model-len", "8", "--y-new", "2", "--x-new", "1", "--headless")])
    assert "(b vs a: an unknown option)" in failure.value.message
    assert control_args(head, [head, serve_node("b", "--max-model-len", "8", "--port", "8000", "--headless")]) == (8, ("--port", "8000"))


def test_nodes_on_different_images_are_refused_naming_each_image_id_prefix():
    with pytest.raises(RolloutError) as failure:
        base_pin([serve_node("a"), serve_node("b", image_id=IMAGE_B)])
    message = failure.value.message
    assert f"a runs spark:v5 ({IMAGE_A[:19]}); b runs spark:v5 ({IMAGE_B[:19]})" in message and IMAGE_A[:20] not in message
    assert failure.value.fix.startswith("serve one image on every node")
    assert base_pin([serve_node("a")]).image_id == IMAGE_A
    pinned = NodeServe("a", "h", {"Image": IMAGE_A}, None, {"RepoDigests": ["r@sha256:" + "e" * 64, "q@sha256:" + "f" * 64]})
    assert base_pin([pinned]) == base_pin([pinned]).__class__("q@sha256:" + "f" * 64, IMAGE_A, True)


def test_mounts_are_sorted_by_what_kvbake_does_with_them():
    mounts = ({"Type": "bind", "Source": "/srv/models", "Destination": "/models"},
              {"Type": "bind", "Source": "/srv/cache", "Destination": "/root/.cache"},
              {"Source": "/etc/hosts", "Destination": "/etc/hosts", "RW": False},
              {"Type": "bind", "Source": "/srv/patch.py", "Destination": f"{ROOT}/vllm/patch.py"},
              {"Type": "bind", "Source": "/srv/usr", "Destination": "/usr/local/lib"},
              {"Type": "volume", "Source": "v", "Destination": "/data"},
              {"Type": "bind", "Destination": "/empty-source", "RW": False})
    found = classify_mounts({"Mounts": list(mounts)}, "/models/m", ROOT)
    assert (found.model_dir, found.model_target) == ("/srv/models/m", "/models/m"), "the model is a subfolder of the mount"
    assert found.writable == ("/srv/cache:/root/.cache",) and found.read_only == ("/etc/hosts:/etc/hosts", ":/empty-source")
    assert found.overlay == ("/usr/local/lib", f"{ROOT}/vllm/patch.py")
    exact = classify_mounts({"Mounts": [{"Type": "bind", "Source": "/srv/m", "Destination": "/models/m"}]}, "/models/m", ROOT)
    assert (exact.model_dir, exact.model_target) == ("/srv/m", "/models/m")
    sibling = classify_mounts({"Mounts": [{"Type": "bind", "Source": "/srv/m", "Destination": "/models/m2", "RW": False}]}, "/models/m", ROOT)
    assert (sibling.model_dir, sibling.model_target, sibling.read_only) == ("", "", ("/srv/m:/models/m2",))
    unnamed = classify_mounts({"Mounts": [{"Type": "bind", "Destination": "/cache"}]}, "/models/m", ROOT)
    assert (unnamed.model_dir, unnamed.model_target, unnamed.writable, unnamed.overlay) == ("", "", (":/cache",), ())


@pytest.mark.parametrize(("device", "text"), [
    ({"PathOnHost": "/dev/infiniband"}, "/dev/infiniband"),
    ({"PathOnHost": "/dev/a", "PathInContainer": "/dev/a", "CgroupPermissions": "rwm"}, "/dev/a"),
    ({"PathOnHost": "/dev/a", "PathInContainer": "/dev/b"}, "/dev/a:/dev/b"),
    ({"PathOnHost": "/dev/a", "CgroupPermissions": "r"}, "/dev/a:/dev/a:r"),
])
def test_a_device_is_written_as_docker_reads_it(device, text):
    assert device_text(device) == text


def test_the_serves_own_environment_is_what_differs_from_the_images():
    switches, env, overrides = serve_env({"A": "x=y", "B": "2", "S": "1", "PYTHONPATH": "/p", "HOME": "/root"}, ["A=x=y", "B=1"], ("S",))
    assert (switches, env, overrides) == ({"S": "1"}, {"B": "2"}, {"PYTHONPATH": "/p"})
    assert split_env({}) == ({}, {})


def test_a_drafter_without_positions_gives_none():
    assert find_drafter(parse_serve_args(["m", "--spec-url", "http://d:8100/v1"])).max_positions is None
    assert find_drafter(parse_serve_args(["m", "--spec", '{"url": "http://d", "max_model_len": 65536}'])).max_positions == 65536


def test_the_description_carries_switches_overrides_model_drafter_changes_and_no_master_port_when_none():
    env = {"S": "3", "LD_PRELOAD": "/x.so", "HF_HUB_OFFLINE": "1"}
    head = serve_node("a", "--max-model-len", "8", "--spec-url", "http://d:1/v1", env=env,
                      host_config={"ShmSize": 2 * 1024 ** 3}, mounts=({"Type": "bind", "Source": "/srv/m", "Destination": "/models"},))
    head = NodeServe(head.node, head.host, head.container, head.serving, head.image, changes=(f"{ROOT}/vllm/x.py",))
    described = describe([head], ("S",), ROOT)
    assert described.switches == {"S": "3"} and described.overrides == {"LD_PRELOAD": "/x.so"} and described.env == {"HF_HUB_OFFLINE": "1"}
    assert described.model == "/models/m" and described.drafter.url == "http://d:1/v1"
    assert described.changes == {"a": (f"{ROOT}/vllm/x.py",)} and described.master_port == "" and described.shape == "main"
    assert described.gpus is False and described.shm_size == "2g" and described.mounts.model_target == "/models/m"


def test_a_ray_worker_listed_first_does_not_hide_the_others_addresses():
    worker = NodeServe("b", "ssh://b", {"Name": "/b"}, None, {})
    head = serve_node("a", "--max-model-len", "8", "--master-addr", "10.0.0.11", env={"VLLM_HOST_IP": "10.0.0.11"})
    other = serve_node("c", "--max-model-len", "8", "--headless", env={"VLLM_HOST_IP": "10.0.0.13"})
    assert addresses_of([worker, head, other], head) == {"a": "10.0.0.11", "c": "10.0.0.13"}


def test_a_nodes_cache_mounts_leave_out_the_folder_that_holds_its_model():
    mounts = ({"Type": "bind", "Source": "/srv/models", "Destination": "/models"},
              {"Type": "bind", "Source": "/srv/cache", "Destination": "/root/.cache"})
    assert node_launch(serve_node("a", "--max-model-len", "8", mounts=mounts), {}, ROOT) == {"cache_mounts": ["/srv/cache:/root/.cache"]}
