"""init's pure core: the serve a pair runs described (base, control's arguments, switches, env, mounts, drafter), the two
documents written from it, and the check that a running serve equals a preset."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from kvbake.engines.core.procfs import Process
from kvbake_rig.ports import free_port
from kvbake.errors import IntegrityError, RolloutError
from kvbake.cli import main
from kvbake.manifest import Preset
from kvbake.operate.core.serve_presets import nearest, preset_differences, presets_served
from message_words import says
from kvbake.ship.core.init_documents import InitOptions, deploy_document, launcher_env, manifest_document, placeholders
from kvbake.serve.core.serve_description import (NodeServe, base_pin, choose_container, classify_mounts, describe, find_drafter,
                                                implied_preset, privileged_line, require_serving, serve_env, with_served_length)
from kvbake.serve.core.serve_reading import read_serve
from kvbake.serve.core.vllm_argv import parse_serve_args

ROOT = "/usr/local/lib/python3.12/dist-packages"
SWITCHES = ("VLLM_A", "VLLM_B")
SHARED = ("--served-model-name", "dsv41", "--gpu-memory-utilization", "0.85", "--kv-cache-dtype", "fp8", "--port", "8000")
HEAD = ("--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.11", "--master-port", "29501")
WORKER = ("--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.11", "--master-port", "29501", "--headless")
IMAGE_ENV = ("PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all")
TEMPLATE = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifest.yaml").read_text())


def serve_argv(*extra: str, length: str = "163840") -> tuple[str, ...]:
    return ("python3", "/usr/local/bin/vllm", "serve", "/models/dsv41", "--max-model-len", length, *SHARED, *extra)


def node(name: str, argv: tuple[str, ...] | None, env: dict | None = None, image_id: str = "sha256:" + "a" * 64,
         digests: tuple[str, ...] = ("ghcr.io/x/spark@sha256:" + "d" * 64,), mounts: tuple[dict, ...] = (), execd: bool = False,
         host_config: dict | None = None, ray: tuple[str, ...] = ()) -> NodeServe:
    env = {**dict(e.split("=", 1) for e in IMAGE_ENV), **(env or {})}
    processes = [Process(1, 0, ray or (("sleep", "infinity") if execd or argv is None else argv), env, "/", "/bin/x", 0)]
    if execd and argv is not None:
        processes.append(Process(30, 0, argv, env, "/", "/usr/bin/python3", 0))
    reading = read_serve(processes)
    container = {"Id": name * 8, "Name": f"/{name}-serve", "Image": image_id, "Config": {"Image": "spark:v5", "Env": list(IMAGE_ENV)},
                 "Mounts": list(mounts or ({"Type": "bind", "Source": "/srv/models/dsv41", "Destination": "/models/dsv41", "RW": False},)),
                 "HostConfig": host_config or {"DeviceRequests": [{"Count": -1}], "ShmSize": 16 * 1024 ** 3}}
    serving = reading.serving[0] if reading.serving else None
    return NodeServe(name, f"ssh://ops@{name}", container, serving, {"RepoDigests": list(digests), "Config": {"Env": list(IMAGE_ENV)}},
                     ray_node=ray)


def pair(**head_options) -> list[NodeServe]:
    return [node("spark-a", serve_argv(*HEAD), **head_options), node("spark-b", serve_argv(*WORKER))]


# ---- finding the serve ----

def test_the_one_container_running_vllm_is_chosen_and_a_ray_node_only_where_none_runs():
    assert choose_container("spark-a", ["vllm_node"], ["ray"]) == "vllm_node"
    assert choose_container("spark-b", [], ["node"]) == "node"


@pytest.mark.parametrize(("serving", "cluster", "named"), [pytest.param([], [], "no serving container", id="none"),
                                                           pytest.param(["a", "b"], [], "2 candidate", id="two"),
                                                           pytest.param([], ["n1", "n2"], "2 candidate", id="two-ray-nodes")])
def test_no_candidate_or_two_candidates_is_refused_and_names_the_option(serving, cluster, named):
    with pytest.raises(RolloutError) as caught:
        choose_container("spark-a", serving, cluster)
    assert named in caught.value.message and "--container" in caught.value.fix


def test_an_exec_shape_container_whose_vllm_is_gone_is_refused_unless_it_is_a_ray_worker():
    assert require_serving("spark-b", (), cluster=True) is None
    with pytest.raises(IntegrityError):
        require_serving("spark-a", (), cluster=False)


# ---- the base ----

def test_the_base_is_pinned_by_its_registry_digest_else_by_its_reference():
    assert base_pin(pair()).image == "ghcr.io/x/spark@sha256:" + "d" * 64 and base_pin(pair()).by_digest
    local = base_pin([node("spark-a", serve_argv(*HEAD), digests=()), node("spark-b", serve_argv(*WORKER), digests=())])
    assert (local.image, local.by_digest) == ("spark:v5", False)


def test_nodes_on_different_images_are_refused_naming_both():
    with pytest.raises(RolloutError) as caught:
        base_pin([node("spark-a", serve_argv(*HEAD)), node("spark-b", serve_argv(*WORKER), image_id="sha256:" + "b" * 64)])
    assert "spark-a" in caught.value.message and "spark-b" in caught.value.message


# ---- control ----

def test_control_is_the_heads_serve_less_the_per_node_options_the_model_and_the_length():
    described = describe(pair(), SWITCHES, ROOT)
    assert described.head == "spark-a" and described.max_model_len == 163840
    assert described.launcher_args == SHARED
    assert described.addresses == {"spark-a": "10.0.0.11"} and described.master_port == "29501"


def test_ranks_that_disagree_beyond_the_per_node_options_are_refused():
    nodes = [node("spark-a", serve_argv(*HEAD)), node("spark-b", serve_argv(*WORKER, "--enforce-eager"))]
    with pytest.raises(RolloutError) as caught:
        describe(nodes, SWITCHES, ROOT)
    assert "--enforce-eager" in caught.value.message


def test_a_serve_without_max_model_len_takes_the_length_its_api_says_and_without_one_head_is_refused():
    described = describe([node("spark-a", ("vllm", "serve", "/models/dsv41", *HEAD))], SWITCHES, ROOT)
    assert described.max_model_len == 0, "no length yet: init asks the serve's /v1/models"
    served = with_served_length(described, 131072, "")
    assert (served.max_model_len, served.length_from_api) == (131072, True)
    control = manifest_document(TEMPLATE, served, InitOptions())["presets"]["control"]
    assert control["max_model_len"] == 131072 and "its /v1/models said" in control["note"]
    given = describe(pair(), SWITCHES, ROOT)
    assert with_served_length(given, 4096, "") is given, "a serve's own --max-model-len wins over what its API says"
    with pytest.raises(RolloutError):
        describe([node("spark-a", serve_argv(*WORKER)), node("spark-b", serve_argv(*WORKER))], SWITCHES, ROOT)


@pytest.mark.parametrize(("why", "fix"), [
    ("http://10.0.0.11:8000/v1/models answered HTTP 401", "export the serve's API key as VLLM_API_KEY where init runs"),
    ("http://10.0.0.11:8000/v1/models did not answer (ConnectError)", "run init while the serve answers its API"),
])
def test_a_serve_that_gives_no_length_and_whose_api_says_none_is_refused_naming_what_it_answered(why, fix):
    described = describe([node("spark-a", ("vllm", "serve", "/models/dsv41", *HEAD))], SWITCHES, ROOT)
    with pytest.raises(RolloutError) as refused:
        with_served_length(described, None, why)
    assert says(refused.value.message, "the serve on spark-a gives no --max-model-len") and says(refused.value.message, why)
    assert refused.value.fix.startswith(fix)


def test_a_length_that_is_no_number_is_refused():
    with pytest.raises(RolloutError, match="gives --max-model-len 128k, which is no number"):
        describe([node("spark-a", ("vllm", "serve", "/models/dsv41", "--max-model-len", "128k", *HEAD))], SWITCHES, ROOT)


RAY_HEAD = ("ray", "start", "--block", "--head", "--port=6380")
RAY_WORKER_NODE = ("ray", "start", "--block", "--address=10.0.0.11:6380")


def test_a_ray_cluster_is_described_in_the_ray_shape_with_its_port():
    described = describe([node("spark-a", serve_argv("--distributed-executor-backend", "ray"), execd=True, ray=RAY_HEAD),
                          node("spark-b", None, execd=True, ray=RAY_WORKER_NODE)], SWITCHES, ROOT)
    assert described.shape == "ray" and described.ray_port == "6380"
    assert described.launcher_args == (*SHARED, "--distributed-executor-backend", "ray")
    assert (launcher_env(described, ROOT)["SHAPE"], launcher_env(described, ROOT)["RAY_PORT"]) == ("ray", "6380")


def test_a_ray_head_on_rays_default_port_needs_no_ray_port():
    described = describe([node("spark-a", serve_argv(), execd=True, ray=("ray", "start", "--block", "--head")),
                          node("spark-b", None, execd=True, ray=RAY_WORKER_NODE)], SWITCHES, ROOT)
    assert described.shape == "ray" and "RAY_PORT" not in launcher_env(described, ROOT)


@pytest.mark.parametrize("backend", [("--distributed-executor-backend", "mp"), ()], ids=["mp-named", "nnodes-alone"])
def test_ray_nodes_a_multiprocessing_serve_does_not_use_are_no_part_of_it(backend):
    # eugr's containers always run a Ray node; its newer launchers serve with vLLM's multiprocessing backend across
    # them, the worker's rank headless: kvbake's release starts vLLM by docker exec on both and no Ray node
    ray_worker = ("ray", "start", "--block", "--address=10.0.0.11:6380", "--node-ip-address=10.0.0.12")
    described = describe([node("spark-a", serve_argv(*HEAD, *backend), execd=True, ray=(*RAY_HEAD, "--dashboard-port=8265")),
                          node("spark-b", serve_argv(*WORKER, *backend), execd=True, ray=ray_worker)], SWITCHES, ROOT)
    env = launcher_env(described, ROOT)
    assert described.shape == "exec" and env["SHAPE"] == "exec" and described.ray_start == () and described.ray_port == ""
    assert not any(name.startswith("RAY_") for name in env), env
    assert all(not launch.get("ray_start") for launch in described.node_launch.values()), described.node_launch
    assert described.master_port == "29501"


def test_a_ray_node_the_serve_places_its_ranks_through_keeps_the_ray_shape():
    described = describe([node("spark-a", serve_argv("--distributed-executor-backend", "ray", "--nnodes", "1"), execd=True, ray=RAY_HEAD),
                          node("spark-b", None, execd=True, ray=RAY_WORKER_NODE)], SWITCHES, ROOT)
    assert described.shape == "ray"


def test_a_waiting_container_with_vllm_execd_is_the_exec_shape():
    described = describe([node("spark-a", serve_argv(*HEAD), execd=True), node("spark-b", serve_argv(*WORKER), execd=True)], SWITCHES, ROOT)
    assert described.shape == "exec" and launcher_env(described, ROOT)["SHAPE"] == "exec"


def test_an_unreadable_command_line_is_refused():
    with pytest.raises(IntegrityError):
        node("spark-a", serve_argv("--config", "serve.yaml"))


# ---- environment, mounts, drafter ----

def test_switches_env_and_code_overrides_are_told_apart_from_the_images_own_env():
    switches, env, overrides = serve_env({"PATH": "/usr/bin", "HOSTNAME": "x", "VLLM_A": "1", "NCCL_SOCKET_IFNAME": "enp1",
                                          "PYTHONPATH": "/opt/shadow"}, IMAGE_ENV, SWITCHES)
    assert (switches, env, overrides) == ({"VLLM_A": "1"}, {"NCCL_SOCKET_IFNAME": "enp1"}, {"PYTHONPATH": "/opt/shadow"})


def test_mounts_are_sorted_into_model_read_only_writable_and_the_overlay_over_the_source_root():
    mounts = classify_mounts({"Mounts": [
        {"Type": "bind", "Source": "/srv/m", "Destination": "/models/dsv41", "RW": False},
        {"Type": "bind", "Source": "/srv/hf", "Destination": "/root/.cache/huggingface", "RW": True},
        {"Type": "bind", "Source": "/srv/tok", "Destination": "/etc/tok", "RW": False},
        {"Type": "bind", "Source": "/srv/p/x.py", "Destination": ROOT + "/vllm/x.py", "RW": False},
        {"Type": "volume", "Source": "", "Destination": "/data"}]}, "/models/dsv41", ROOT)
    assert (mounts.model_dir, mounts.read_only, mounts.writable, mounts.overlay) == (
        "/srv/m", ("/srv/tok:/etc/tok",), ("/srv/hf:/root/.cache/huggingface",), (ROOT + "/vllm/x.py",))


def test_a_drafter_url_and_its_positions_are_found_in_the_arguments():
    args = parse_serve_args(["/m", "--speculative-config", '{"method": "remote", "url": "http://10.0.0.20:8100", "max_model_len": 327680}'])
    assert find_drafter(args).url == "http://10.0.0.20:8100"
    assert (find_drafter(args).option, find_drafter(args).max_positions) == ("--speculative-config", 327680)
    assert find_drafter(parse_serve_args(["/m", *SHARED])) is None


# ---- the documents ----

def test_the_manifest_keeps_the_chain_and_gives_every_preset_controls_arguments():
    described = describe(pair(), SWITCHES, ROOT)
    manifest = manifest_document(TEMPLATE, described, InitOptions("10.0.0.5:5000", "", "f" * 40))
    assert manifest["chain"] == TEMPLATE["chain"] and manifest["base"]["image"] == described.base.image
    assert manifest["presets"]["control"]["max_model_len"] == 163840
    assert {tuple(p["launcher_args"]) for p in manifest["presets"].values()} == {SHARED}
    assert manifest["presets"]["packing-327680"]["max_model_len"] == 327680
    assert manifest["output"]["repository"] == "10.0.0.5:5000/dsv41-kvpack" and manifest["donor"]["revision"] == "f" * 40
    assert TEMPLATE["presets"]["control"].get("launcher_args") is None, "the template is not changed"


def test_the_deployment_file_names_each_nodes_container_and_the_launchers_settings():
    nodes = [node("spark-b", serve_argv(*WORKER), env={"HF_HUB_OFFLINE": "1", "NCCL_SOCKET_IFNAME": "enp2", "VLLM_HOST_IP": "10.0.0.12"}),
             node("spark-a", serve_argv(*HEAD), env={"HF_HUB_OFFLINE": "1", "NCCL_SOCKET_IFNAME": "enp1", "VLLM_HOST_IP": "10.0.0.11"})]
    described = describe(nodes, SWITCHES, ROOT)
    deploy = deploy_document(nodes, described, ROOT)
    assert [(n["name"], n["role"], n["container"]) for n in deploy["nodes"]] == [("spark-a", "head", "spark-a-serve"),
                                                                                ("spark-b", "worker", "spark-b-serve")]
    env = deploy["launcher"]["env"]
    assert (env["MODEL_DIR"], env["VLLM_PORT"], env["MASTER_PORT"], env["GPUS"], env["SHM_SIZE"]) == ("/srv/models/dsv41", "8000", "29501", "all", "16g")
    assert json.loads(env["CONTAINER_ENV"]) == {"HF_HUB_OFFLINE": "1", "VLLM_HOST_IP": "{node_address}"}
    assert described.node_env == {"spark-a": {"NCCL_SOCKET_IFNAME": "enp1", "VLLM_HOST_IP": "10.0.0.11"},
                                  "spark-b": {"NCCL_SOCKET_IFNAME": "enp2", "VLLM_HOST_IP": "10.0.0.12"}}
    assert described.addresses == {"spark-a": "10.0.0.11", "spark-b": "10.0.0.12"}
    assert [n.get("launch") for n in deploy["nodes"]] == [{"env": {"NCCL_SOCKET_IFNAME": "enp1"}}, {"env": {"NCCL_SOCKET_IFNAME": "enp2"}}]
    assert "SERVED_MODEL_NAME" not in env, "--served-model-name is among the preset's arguments"
    assert deploy["readiness"]["url"] == "http://10.0.0.11:8000/health" and deploy["start"] == "workers-first"


def test_each_nodes_devices_capabilities_ulimits_and_writable_mounts_become_its_launch_settings():
    host = {"Devices": [{"PathOnHost": "/dev/infiniband", "PathInContainer": "/dev/infiniband", "CgroupPermissions": "rwm"},
                        {"PathOnHost": "/dev/null", "PathInContainer": "/dev/x", "CgroupPermissions": "r"}],
            "CapAdd": ["IPC_LOCK"], "Ulimits": [{"Name": "memlock", "Soft": -1, "Hard": -1}, {"Name": "stack", "Soft": 1, "Hard": 2}]}
    mounts = ({"Type": "bind", "Source": "/srv/m", "Destination": "/models/dsv41", "RW": False},
              {"Type": "bind", "Source": "/srv/hf", "Destination": "/root/.cache/huggingface", "RW": True})
    nodes = [node("spark-a", serve_argv(*HEAD), host_config=host, mounts=mounts), node("spark-b", serve_argv(*WORKER))]
    launch = describe(nodes, SWITCHES, ROOT).node_launch
    assert launch == {"spark-a": {"devices": ["/dev/infiniband", "/dev/null:/dev/x:r"], "cap_add": ["IPC_LOCK"],
                                  "ulimits": {"memlock": -1, "stack": "1:2"}, "cache_mounts": ["/srv/hf:/root/.cache/huggingface"]}}


def test_each_placeholder_left_is_named_with_its_fix():
    described = describe(pair(digests=()), SWITCHES, ROOT)
    manifest = manifest_document(TEMPLATE, described, InitOptions())
    deploy = deploy_document(pair(digests=()), described, ROOT, signing_keys=["alice.pub"])
    where = [p.where for p in placeholders(manifest, deploy, described)]
    assert where == ["manifest.yaml output.repository", "manifest.yaml donor.revision", "deploy.yaml nodes[].address of spark-b",
                     "manifest.yaml base.image (no registry digest)"]
    filled = manifest_document(TEMPLATE, describe(pair(), SWITCHES, ROOT), InitOptions("r:5000", "", "f" * 40))
    assert [p.where for p in placeholders(filled, deploy, describe(pair(), SWITCHES, ROOT))] == ["deploy.yaml nodes[].address of spark-b"]


def test_the_switch_set_found_names_the_preset_it_implies():
    presets = {"control": {"switches": {}}, "packing": {"switches": {"VLLM_A": "1"}}}
    assert implied_preset({"VLLM_A": "1"}, presets) == "packing" and implied_preset({"VLLM_B": "1"}, presets) is None


# ---- a running serve against the presets ----

def preset(name: str, length: int = 163840, switches=None, args=SHARED) -> Preset:
    return Preset(name, "validated", length, switches or {}, "n", 16, tuple(args))


def test_a_serve_equals_the_preset_whatever_the_order_and_spelling_of_its_arguments():
    args = parse_serve_args(["/m", "--port=8000", "--max_model_len", "163840", *SHARED[:6], *HEAD])
    assert preset_differences(args, {}, preset("control")) == []
    presets = {"control": preset("control"), "packing": preset("packing", 327680, {"VLLM_A": "1"})}
    assert presets_served(args, {}, presets) == ["control"]


@pytest.mark.parametrize(("argv", "switches", "named"), [
    (["/m", "--max-model-len", "163840", *SHARED, "--enforce-eager"], {}, "--enforce-eager"),
    (["/m", "--max-model-len", "163840", *SHARED[:-1], "9000"], {}, "--port"),
    (["/m", "--max-model-len", "131072", *SHARED], {}, "--max-model-len 131072"),
    (["/m", "--max-model-len", "163840", *SHARED], {"VLLM_A": "1"}, "switches"),
])
def test_every_difference_from_the_preset_is_named(argv, switches, named):
    differences = preset_differences(parse_serve_args(argv), switches, preset("control"))
    assert differences and any(named in d for d in differences)
    assert nearest(parse_serve_args(argv), switches, {"control": preset("control")})[0] == "control"


# ---- the command line ----

def test_init_over_an_existing_manifest_is_refused_before_any_node_is_read(tmp_path, capsys):
    (tmp_path / "manifest.yaml").write_text("kept")
    code = main(["init", "--node", "spark-a=unix:///nonexistent/docker.sock", "--out", str(tmp_path)])
    assert code == 2 and "--force" in capsys.readouterr().err
    assert (tmp_path / "manifest.yaml").read_text() == "kept" and not (tmp_path / "deploy.yaml").exists()


@pytest.mark.parametrize("argv", [("--node", "spark-a"), ("--node", "a=unix:///x", "--node", "a=unix:///y"),
                                  ("--node", "a=unix:///x", "--container", "b=serve"), ("--node", "a=unix:///x", "--donor-revision", "abc")])
def test_malformed_init_options_are_usage_errors(argv, tmp_path, capsys):
    assert main(["init", *argv, "--out", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())


def test_the_deployment_file_init_writes_loads_as_a_valid_deployment(tmp_path):
    from kvbake.deployfile import load_deployment
    from kvbake.ship.adapters.project_init import dump

    nodes = [node("spark-a", serve_argv(*HEAD), env={"NCCL_SOCKET_IFNAME": "enp1", "VLLM_HOST_IP": "10.0.0.11"},
                  host_config={"CapAdd": ["IPC_LOCK"], "Ulimits": [{"Name": "memlock", "Soft": -1, "Hard": -1}]}),
             node("spark-b", serve_argv(*WORKER), env={"NCCL_SOCKET_IFNAME": "enp2", "VLLM_HOST_IP": "10.0.0.12"})]
    described = describe(nodes, SWITCHES, ROOT)
    (tmp_path / "deploy.yaml").write_bytes(dump(deploy_document(nodes, described, ROOT)))
    deployment = load_deployment(tmp_path / "deploy.yaml")
    assert [(n.name, n.container) for n in deployment.nodes] == [("spark-a", "spark-a-serve"), ("spark-b", "spark-b-serve")]
    assert deployment.launcher.command == ("kvbake-launch-vllm",)


def test_a_template_pin_that_names_the_running_image_is_kept_and_the_launcher_is_the_one_given():
    described = describe(pair(digests=()), SWITCHES, ROOT)
    kept = manifest_document(TEMPLATE, described, InitOptions(kept_base=TEMPLATE["base"]["image"]))
    assert kept["base"]["image"] == TEMPLATE["base"]["image"]
    deploy = deploy_document(pair(digests=()), described, ROOT, ("python3", "my_launcher.py"))
    assert deploy["launcher"]["command"] == ["python3", "my_launcher.py"]
    assert "manifest.yaml base.image (no registry digest)" not in [p.where for p in placeholders(kept, deploy, described)]


def test_the_drafter_option_is_left_to_the_launcher_and_its_json_value_becomes_a_template():
    spec = '{"method": "remote", "url": "http://10.0.0.20:8100", "max_model_len": 163840}'
    nodes = [node("spark-a", serve_argv(*HEAD, "--speculative-config", spec)), node("spark-b", serve_argv(*WORKER, "--speculative-config", spec))]
    described = describe(nodes, SWITCHES, ROOT)
    assert "--speculative-config" not in described.launcher_args, "written once: DRAFTER_ARGS gives it"
    env = launcher_env(described, ROOT)
    assert json.loads(env["DRAFTER_ARGS"]) == ["--speculative-config", '{"method": "remote", "url": "{url}", "max_model_len": {max_positions}}']
    assert preset_differences(nodes[0].serving.serve.args, {}, Preset("control", "validated", 163840, {}, "n", 16, described.launcher_args)) == []


def test_the_drafters_own_limit_is_read_from_its_models_list_and_none_when_it_does_not_answer():
    from kvbake.ship.adapters.served_length import served_positions
    from tests.doubles.openai_double import OpenAIDouble

    with OpenAIDouble(max_model_len=327680) as drafter:
        assert served_positions(drafter.url) == 327680
    with OpenAIDouble() as drafter:
        assert served_positions(drafter.url) is None, "a models list without max_model_len says nothing"
    assert served_positions(f"http://127.0.0.1:{free_port()}") is None


def test_a_model_in_a_subfolder_of_its_mount_and_a_hub_model_give_the_launcher_the_right_model():
    models = {"Type": "bind", "Source": "/srv/models", "Destination": "/models", "RW": False}
    sub = [node("spark-a", serve_argv(*HEAD), mounts=(models,)), node("spark-b", serve_argv(*WORKER), mounts=(models,))]
    described = describe(sub, SWITCHES, ROOT)
    assert launcher_env(described, ROOT)["MODEL_DIR"] == "/srv/models/dsv41", "the mount's source plus the subfolder the serve names"
    hub = [node(n, tuple(a if a != "/models/dsv41" else "deepseek-ai/DeepSeek-V4.1-Flash" for a in serve_argv(*args)))
           for n, args in (("spark-a", HEAD), ("spark-b", WORKER))]
    described = describe(hub, SWITCHES, ROOT)
    env = launcher_env(described, ROOT)
    assert env["MODEL"] == "deepseek-ai/DeepSeek-V4.1-Flash" and "MODEL_DIR" not in env
    left = placeholders(manifest_document({"base": {}, "donor": {}, "output": {"repository": "r:1/x"}, "presets": {}}, described, InitOptions()),
                        deploy_document(hub, described, ROOT), described)
    assert not any(p.where.endswith("MODEL_DIR") for p in left)


def test_a_ray_workers_own_address_interfaces_and_ray_start_options_are_read_from_its_ray_node():
    head_ray = ("ray", "start", "--block", "--head", "--port=6380", "--node-ip-address", "10.0.0.11", "--object-store-memory=8000000000")
    worker_ray = ("ray", "start", "--block", "--address=10.0.0.11:6380", "--node-ip-address=10.0.0.12", "--object-store-memory=8000000000")
    head = node("spark-a", serve_argv("--distributed-executor-backend", "ray"), execd=True, ray=head_ray,
                env={"VLLM_HOST_IP": "10.0.0.11", "NCCL_SOCKET_IFNAME": "enp1", "NCCL_IB_HCA": "roce1"})
    worker = node("spark-b", None, ray=worker_ray)
    worker = NodeServe(worker.node, worker.host, worker.container, None, worker.image, (), worker_ray,
                       {"PATH": "/usr/bin", "VLLM_HOST_IP": "10.0.0.12", "NCCL_SOCKET_IFNAME": "enp2", "NCCL_IB_HCA": "roce2"})
    described = describe([head, worker], SWITCHES, ROOT)
    assert described.addresses == {"spark-a": "10.0.0.11", "spark-b": "10.0.0.12"}
    assert described.node_env["spark-b"] == {"VLLM_HOST_IP": "10.0.0.12", "NCCL_SOCKET_IFNAME": "enp2", "NCCL_IB_HCA": "roce2"}
    env = launcher_env(described, ROOT)
    assert json.loads(env["RAY_START_ARGS"]) == ["--node-ip-address={node_address}", "--object-store-memory=8000000000"]
    assert json.loads(env["CONTAINER_ENV"])["VLLM_HOST_IP"] == "{node_address}"
    assert all("ray_start" not in launch for launch in described.node_launch.values()), "the nodes agree: nothing of their own"
    other = NodeServe(worker.node, worker.host, worker.container, None, worker.image, (), (*worker_ray[:-1], "--num-cpus=4"), worker.ray_env)
    described = describe([head, other], SWITCHES, ROOT)
    assert json.loads(launcher_env(described, ROOT)["RAY_START_ARGS"]) == ["--node-ip-address={node_address}"]
    assert described.node_launch["spark-a"]["ray_start"] == ["--object-store-memory=8000000000"]
    assert described.node_launch["spark-b"]["ray_start"] == ["--num-cpus=4"]


def test_run_cluster_sh_gives_the_node_ip_address_to_the_head_alone_and_each_node_keeps_what_it_was_given():
    """vLLM's run_cluster.sh as written: `--node-ip-address` on the head's `ray start` only; the worker's address comes
    from RAY_NODE_IP_ADDRESS, which the script sets in its container from VLLM_HOST_IP."""
    head_ray = ("ray", "start", "--block", "--head", "--head", "--node-ip-address=10.0.0.11", "--port=6379")
    worker_ray = ("ray", "start", "--block", "--address=10.0.0.11:6379")
    head = node("spark-a", serve_argv(), execd=True, ray=head_ray, env={"VLLM_HOST_IP": "10.0.0.11", "RAY_NODE_IP_ADDRESS": "10.0.0.11"})
    worker = node("spark-b", None, ray=worker_ray)
    worker = NodeServe(worker.node, worker.host, worker.container, None, worker.image, (), worker_ray,
                       {"PATH": "/usr/bin", "VLLM_HOST_IP": "10.0.0.12", "RAY_NODE_IP_ADDRESS": "10.0.0.12"})
    described = describe([head, worker], SWITCHES, ROOT)
    assert described.ray_start == () and "RAY_START_ARGS" not in launcher_env(described, ROOT)
    assert described.node_launch["spark-a"]["ray_start"] == ["--node-ip-address={node_address}"]
    assert "ray_start" not in described.node_launch["spark-b"], "the worker's ray start gets no option it was not given"
    assert described.addresses == {"spark-a": "10.0.0.11", "spark-b": "10.0.0.12"}


def test_a_host_ip_only_the_head_sets_stays_the_heads_and_is_no_template_for_the_worker():
    """vLLM's run_cluster.sh: the head's vLLM is exec'd with VLLM_HOST_IP, the worker's Ray node sets none."""
    head = node("spark-a", serve_argv("--distributed-executor-backend", "ray"), execd=True, ray=("ray", "start", "--block", "--head"),
                env={"VLLM_HOST_IP": "127.0.0.1", "NCCL_SOCKET_IFNAME": "lo"})
    worker = node("spark-b", None, ray=("ray", "start", "--block", "--address=127.0.0.1:6379"))
    worker = NodeServe(worker.node, worker.host, worker.container, None, worker.image, (), worker.ray_node, {"PATH": "/usr/bin"})
    described = describe([head, worker], SWITCHES, ROOT)
    assert not described.host_ip_by_address and "CONTAINER_ENV" not in launcher_env(described, ROOT)
    assert described.node_launch["spark-a"]["env"] == {"NCCL_SOCKET_IFNAME": "lo", "VLLM_HOST_IP": "127.0.0.1"}


@pytest.mark.parametrize(("head_extra", "worker_extra", "expected"), [
    ((), (), "1"),  # no --tensor-parallel-size: vLLM ran a group of one, the launcher would give one rank per node
    (("--tensor-parallel-size", "2"), ("--tensor-parallel-size", "2"), None),  # given: it is in the preset's arguments
    (("-tp", "2"), ("-tp", "2"), None),
])
def test_a_pair_whose_serve_gives_no_tensor_parallel_size_tells_the_launcher_vllms_default(head_extra, worker_extra, expected):
    described = describe([node("spark-a", serve_argv(*HEAD, *head_extra)), node("spark-b", serve_argv(*WORKER, *worker_extra))], SWITCHES, ROOT)
    assert launcher_env(described, ROOT).get("TENSOR_PARALLEL_SIZE") == expected


def test_one_node_leaves_the_tensor_parallel_size_to_the_launcher():
    described = describe([node("spark-a", serve_argv())], SWITCHES, ROOT)
    assert "TENSOR_PARALLEL_SIZE" not in launcher_env(described, ROOT)


# ---- --privileged made explicit ----

def test_a_privileged_serve_gets_the_devices_its_node_has_the_capability_and_ulimits_never_privileged_itself():
    privileged = {"Privileged": True, "DeviceRequests": [{"Count": -1}], "Ulimits": [{"Name": "nofile", "Soft": 65536, "Hard": 65536}]}
    nodes = [dataclasses.replace(node("spark-a", serve_argv(*HEAD), host_config=privileged), node_devices=("/dev/infiniband",)),
             node("spark-b", serve_argv(*WORKER), host_config=privileged)]
    described = describe(nodes, SWITCHES, ROOT)
    assert described.privileged == ("spark-a", "spark-b")
    assert described.node_launch["spark-a"]["devices"] == ["/dev/infiniband"]
    assert "devices" not in described.node_launch["spark-b"], "a node without RDMA devices gets none"
    for name in ("spark-a", "spark-b"):
        assert described.node_launch[name]["cap_add"] == ["IPC_LOCK"]
        assert described.node_launch[name]["ulimits"] == {"memlock": -1, "stack": 67108864, "nofile": 65536}
    assert privileged_line("spark-a", described.node_launch["spark-a"]) == (
        "spark-a: --privileged is not carried; kvbake's serve gets devices /dev/infiniband, capabilities IPC_LOCK, "
        "ulimits memlock=-1 stack=67108864 nofile=65536 (deploy.yaml nodes[].launch)")
    assert "devices none (the node has no /dev/infiniband)" in privileged_line("spark-b", described.node_launch["spark-b"])


def test_a_serve_that_is_not_privileged_gets_nothing_it_did_not_have():
    described = describe(pair(), SWITCHES, ROOT)
    assert described.privileged == () and not any({"devices", "cap_add", "ulimits"} & set(launch) for launch in described.node_launch.values())


def test_a_privileged_serves_own_memlock_and_devices_win_over_the_explicit_equivalents():
    own = {"Privileged": True, "Ulimits": [{"Name": "memlock", "Soft": 1024, "Hard": 2048}],
           "Devices": [{"PathOnHost": "/dev/infiniband", "PathInContainer": "/dev/infiniband", "CgroupPermissions": "rwm"}]}
    head = dataclasses.replace(node("spark-a", serve_argv(*HEAD), host_config=own), node_devices=("/dev/infiniband",))
    launch = describe([head, node("spark-b", serve_argv(*WORKER))], SWITCHES, ROOT).node_launch["spark-a"]
    assert launch["devices"] == ["/dev/infiniband"] and launch["ulimits"]["memlock"] == "1024:2048"


def test_a_token_given_on_the_command_line_is_carried_by_its_variable_and_a_bare_hf_token_is_kept():
    given = [node("spark-a", serve_argv(*HEAD, "--hf-token", "plain-token-value")), node("spark-b", serve_argv(*WORKER, "--hf-token", "plain-token-value"))]
    described = describe(given, SWITCHES, ROOT)
    assert described.secrets == ("HF_TOKEN",) and "--hf-token" not in described.launcher_args
    assert "plain-token-value" not in json.dumps(launcher_env(described, ROOT))
    bare = [node("spark-a", serve_argv(*HEAD, "--hf-token")), node("spark-b", serve_argv(*WORKER, "--hf-token"))]
    described = describe(bare, SWITCHES, ROOT)
    assert described.secrets == () and described.launcher_args[-1:] == ("--hf-token",), "the host's own login: no secret"
