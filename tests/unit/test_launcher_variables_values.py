"""The variables the launcher is told for one node and one release: where it runs, its rank among the nodes (head first),
the files and arguments (three ways, each argument whole), the addresses, the drafter and the node's own settings."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from fake_fleet import PACKING
from kvbake.deployfile import Deployment, Drafter, Launcher, Node
from kvbake.launcher.core.node_launch import NodeLaunch
from kvbake.serve.core.runtime_config import ARGS_FILE, ENV_FILE, RankSettings
from kvbake.ship.core.launcher_variables import launcher_variables, node_rank

NODES = (Node("w1", "ssh://w1", "worker", "10.0.0.2"), Node("h", "ssh://h", "head", "10.0.0.1"),
         Node("w2", "ssh://w2", "worker", "", launch=NodeLaunch(env={"NCCL_SOCKET_IFNAME": "enp2"}, devices=("/dev/infiniband",))))
SETTINGS = RankSettings("packing", {"S": "3"}, 8192, ("--served-model-name", "my model"), "p" * 64, None)
FILES = {ENV_FILE: Path("/tmp/x/switches.env"), ARGS_FILE: Path("/tmp/x/launcher.args")}


def deployment(drafter: Drafter | None = None) -> Deployment:
    return Deployment(Path("/p/deploy.yaml"), NODES, Launcher(("launch",), "vllm-serve", 60, {"MODEL_DIR": "/srv/m"}), 900, drafter=drafter)


def test_the_head_is_rank_zero_and_workers_follow_in_file_order():
    assert [node_rank(deployment(), name) for name in ("h", "w1", "w2")] == [0, 1, 2]


def test_a_worker_is_told_where_it_runs_what_to_start_and_how():
    variables = launcher_variables(deployment(), "reg:5000/kvbake/x", "w2", PACKING, SETTINGS, FILES)
    assert variables["MODEL_DIR"] == "/srv/m", "the launcher's own env comes along"
    assert (variables["DOCKER_HOST"], variables["KVBAKE_NODE"], variables["KVBAKE_ROLE"]) == ("ssh://w2", "w2", "worker")
    assert variables["KVBAKE_IMAGE"] == "reg:5000/kvbake/x:current" and variables["KVBAKE_CONTAINER"] == "vllm-serve"
    assert (variables["KVBAKE_ENV_FILE"], variables["KVBAKE_ARGS_FILE"]) == ("/tmp/x/switches.env", "/tmp/x/launcher.args")
    assert variables["KVBAKE_MAX_MODEL_LEN"] == str(PACKING.max_model_len) and variables["KVBAKE_PRESET"] == "packing"
    argv = ["--max-model-len", "8192", "--served-model-name", "my model"]
    assert shlex.split(variables["KVBAKE_LAUNCHER_ARGS"]) == argv and json.loads(variables["KVBAKE_LAUNCHER_ARGS_JSON"]) == argv
    assert (variables["KVBAKE_NODE_RANK"], variables["KVBAKE_NNODES"]) == ("2", "3")
    assert (variables["KVBAKE_NODE_ADDRESS"], variables["KVBAKE_HEAD_ADDRESS"]) == ("", "10.0.0.1")
    assert (variables["KVBAKE_DRAFTER_URL"], variables["KVBAKE_DRAFTER_MAX_POSITIONS"]) == ("", "")
    launch = json.loads(variables["KVBAKE_NODE_LAUNCH_JSON"])
    assert launch["env"] == {"NCCL_SOCKET_IFNAME": "enp2"} and launch["devices"] == ["/dev/infiniband"]


def test_the_drafter_is_passed_with_its_positions_when_the_deployment_gives_them():
    variables = launcher_variables(deployment(Drafter("http://d:8100", 65536)), "r/x", "h", PACKING, SETTINGS, FILES)
    assert (variables["KVBAKE_DRAFTER_URL"], variables["KVBAKE_DRAFTER_MAX_POSITIONS"]) == ("http://d:8100", "65536")
    assert variables["KVBAKE_NODE_ADDRESS"] == "10.0.0.1" and variables["KVBAKE_NODE_RANK"] == "0"
    unbounded = launcher_variables(deployment(Drafter("http://d:8100")), "r/x", "h", PACKING, SETTINGS, FILES)
    assert unbounded["KVBAKE_DRAFTER_MAX_POSITIONS"] == ""
    headless = Deployment(Path("/p/deploy.yaml"), NODES[:1], deployment().launcher, 900)
    assert launcher_variables(headless, "r/x", "w1", PACKING, SETTINGS, FILES)["KVBAKE_HEAD_ADDRESS"] == ""


def test_the_images_working_directory_is_passed_so_that_no_mount_shadows_vllm_there():
    import dataclasses

    in_workspace = dataclasses.replace(PACKING, image_config={"Env": [], "Entrypoint": [], "Cmd": [], "WorkingDir": "/workspace"})
    assert launcher_variables(deployment(), "r/x", "h", in_workspace, SETTINGS, FILES)["KVBAKE_WORKDIR"] == "/workspace"
    assert launcher_variables(deployment(), "r/x", "h", dataclasses.replace(PACKING, image_config=None), SETTINGS, FILES)["KVBAKE_WORKDIR"] == ""
