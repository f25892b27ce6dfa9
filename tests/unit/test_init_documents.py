"""The two documents init writes, whole: the deployment file and the launcher's variables for a described serve (one node
without an address, GPUs or a served-model name; a pair with a drafter and per-node variables), and the manifest's
drafter limit and registry."""

from __future__ import annotations

import json

from kvbake.ship.core.init_documents import InitOptions, deploy_document, launcher_env, manifest_document
from kvbake.serve.core.serve_description import BasePin, Drafter, Mounts, NodeServe, ServeDescription

ROOT = "/usr/local/lib/python3.11/dist-packages"
BASE = BasePin("reg/spark@sha256:" + "d" * 64, "sha256:" + "a" * 64, True)


def serve_node(name: str, container: str) -> NodeServe:
    return NodeServe(name, f"ssh://ops@{name}", {"Name": f"/{container}", "Image": BASE.image_id}, None, {})


SOLO = ServeDescription(BASE, "solo", 4096, ("--port", "9000"), {}, {}, Mounts(model_dir="/srv/m", model_target="/models/m"), {}, "",
                        "main", model="/models/m", gpus=False)


def test_a_single_node_without_address_gpus_or_served_name_gets_in_order_start_and_a_loopback_probe():
    assert deploy_document([serve_node("solo", "serve")], SOLO, ROOT) == {
        "format": 1,
        "nodes": [{"name": "solo", "host": "ssh://ops@solo", "role": "head", "container": "serve"}],
        "launcher": {"command": ["kvbake-launch-vllm"], "container": "vllm-serve", "timeout_s": 600,
                     "env": {"MODEL_DIR": "/srv/m", "VLLM_PORT": "9000", "SOURCE_ROOT": ROOT, "GPUS": "none", "SHAPE": "main",
                             "SERVED_MODEL_NAME": "/models/m"}},
        "start": "in-order",
        "readiness": {"url": "http://127.0.0.1:9000/health", "status": 200, "timeout_s": 1800, "interval_s": 2},
        "signing": {"require_signature": True, "keys": []},
    }


PAIR = ServeDescription(BASE, "spark-a", 163840, ("--served-model-name", "dsv41", "--spec-url", "http://10.0.0.20:8100"),
                        {}, {"HF_HUB_OFFLINE": "1"}, Mounts(model_dir="/srv/m", model_target="/models/m", read_only=("/etc/x:/etc/x",)),
                        {"spark-a": "10.0.0.11", "spark-b": "10.0.0.12"}, "29501", "exec", model="/models/m",
                        drafter=Drafter("--spec-url", "http://10.0.0.20:8100", None), shm_size="16g",
                        node_env={"spark-a": {"VLLM_HOST_IP": "10.0.0.11"}, "spark-b": {"VLLM_HOST_IP": "10.0.0.12"}},
                        node_launch={"spark-b": {"env": {"NCCL_SOCKET_IFNAME": "enp2"}}}, host_ip_by_address=True)


def test_a_pair_with_a_drafter_gets_workers_first_the_heads_probe_and_the_drafter_at_controls_length():
    document = deploy_document([serve_node("spark-b", "vllm_node"), serve_node("spark-a", "vllm_node")], PAIR, ROOT, ["/opt/launch"],
                               ["reviewers/alice.pub"])
    assert document == {
        "format": 1,
        "nodes": [{"name": "spark-a", "host": "ssh://ops@spark-a", "role": "head", "address": "10.0.0.11", "container": "vllm_node"},
                  {"name": "spark-b", "host": "ssh://ops@spark-b", "role": "worker", "address": "10.0.0.12", "container": "vllm_node",
                   "launch": {"env": {"NCCL_SOCKET_IFNAME": "enp2"}}}],
        "launcher": {"command": ["/opt/launch"], "container": "vllm-serve", "timeout_s": 600, "env": launcher_env(PAIR, ROOT)},
        "start": "workers-first",
        "readiness": {"url": "http://10.0.0.11:8000/health", "status": 200, "timeout_s": 1800, "interval_s": 2},
        "drafter": {"url": "http://10.0.0.20:8100", "max_positions": 163840},
        "signing": {"require_signature": True, "keys": ["reviewers/alice.pub"]},
    }
    assert launcher_env(PAIR, ROOT) == {
        "MODEL_DIR": "/srv/m", "VLLM_PORT": "8000", "SOURCE_ROOT": ROOT, "GPUS": "all", "SHAPE": "exec", "MASTER_PORT": "29501",
        "SHM_SIZE": "16g", "CONTAINER_ENV": json.dumps({"HF_HUB_OFFLINE": "1", "VLLM_HOST_IP": "{node_address}"}, sort_keys=True),
        "EXTRA_MOUNTS": json.dumps(["/etc/x:/etc/x"]), "DRAFTER_ARGS": json.dumps(["--spec-url", "{url}"])}


def test_a_host_ip_given_on_one_node_only_stays_out_of_the_shared_environment():
    partial = ServeDescription(**{**PAIR.__dict__, "node_env": {"spark-a": {"VLLM_HOST_IP": "10.0.0.11"}, "spark-b": {}}, "host_ip_by_address": False})
    assert json.loads(launcher_env(partial, ROOT)["CONTAINER_ENV"]) == {"HF_HUB_OFFLINE": "1"}
    nothing = ServeDescription(**{**PAIR.__dict__, "node_env": {}, "env": {}, "host_ip_by_address": False})
    assert "CONTAINER_ENV" not in launcher_env(nothing, ROOT)


TEMPLATE = {"base": {"image": "old", "source_root": ROOT}, "donor": {"url": "u", "revision": "0" * 40},
            "output": {"repository": "registry.example.internal:5000/kvbake/dsv41"},
            "presets": {"control": {"max_model_len": 1, "launcher_args": []}, "packing": {"max_model_len": 327680, "launcher_args": []}}}


def test_the_manifest_gets_the_drafter_limit_the_serve_ran_and_the_registry_keeps_the_repository_path():
    document = manifest_document(TEMPLATE, PAIR, InitOptions(registry="registry.lan:5000", donor_revision="f" * 40))
    assert document["drafter"] == {"max_positions": 163840, "note": "the length the serve ran with this drafter (which did not answer "
                                                                    "/v1/models); raise only after the drafter serves more"}
    assert document["output"]["repository"] == "registry.lan:5000/kvbake/dsv41"
    assert document["donor"] == {"url": "u", "revision": "f" * 40} and document["base"]["image"] == BASE.image
    assert {name: (p["max_model_len"], p["launcher_args"]) for name, p in document["presets"].items()} == {
        "control": (163840, list(PAIR.launcher_args)), "packing": (327680, list(PAIR.launcher_args))}
    given = ServeDescription(**{**PAIR.__dict__, "drafter": Drafter("--spec-url", "http://d", 65536)})
    assert manifest_document(TEMPLATE, given, InitOptions())["drafter"] == {
        "max_positions": 65536, "note": "as the serve gave it (the drafter did not answer /v1/models)"}
    answered = ServeDescription(**{**PAIR.__dict__, "drafter": Drafter("--spec-url", "http://d", 65536, served_positions=327680)})
    assert manifest_document(TEMPLATE, answered, InitOptions())["drafter"] == {
        "max_positions": 327680, "note": "what the drafter's /v1/models said it serves when init read it"}
    assert deploy_document([], answered, ROOT)["drafter"] == {"url": "http://d", "max_positions": 327680}
    assert "drafter" not in manifest_document(TEMPLATE, SOLO, InitOptions())
