"""Loading deploy.yaml: the values each field becomes, the defaults, the node launch checks and what each refusal says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.deployfile import Deployment, Launcher, Node, check_node_launches, load_deployment
from kvbake.errors import ManifestError
from kvbake.launcher.core.node_launch import NodeLaunch
from tests.unit.message_words import says

NODES = [{"name": "spark-a", "host": "ssh://ops@spark-a", "role": "head", "container": "serve-a"},
         {"name": "spark-b", "host": "unix:///run/b.sock", "role": "worker", "address": "10.0.0.2"}]
LAUNCHER = {"command": ["/opt/serve/launch.sh", "--now"], "container": "vllm-serve"}


def deployment_file(tmp_path: Path, **fields) -> Path:
    path = tmp_path / "deploy.yaml"
    path.write_text(json.dumps({"format": 1, "nodes": NODES, "launcher": LAUNCHER} | fields))
    return path


def refusal(path: Path) -> ManifestError:
    with pytest.raises(ManifestError) as caught:
        load_deployment(path)
    assert caught.value.exit_code == 3
    return caught.value


def test_every_field_becomes_its_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    deployment_file(tmp_path, lock_stale_after_s=60, start="together",
                    launcher=LAUNCHER | {"timeout_s": 12, "env": {"MODEL": "m"}})
    deployment = load_deployment(Path("deploy.yaml"))
    assert deployment.path == tmp_path / "deploy.yaml"
    assert deployment.nodes == (Node("spark-a", "ssh://ops@spark-a", "head", "", "serve-a", NodeLaunch()),
                                Node("spark-b", "unix:///run/b.sock", "worker", "10.0.0.2", "", NodeLaunch()))
    assert deployment.launcher == Launcher(("/opt/serve/launch.sh", "--now"), "vllm-serve", 12.0, {"MODEL": "m"})
    assert isinstance(deployment.launcher.timeout_s, float) and isinstance(deployment.lock_stale_after_s, float)
    assert (deployment.lock_stale_after_s, deployment.start) == (60.0, "together")
    assert deployment.state_dir == tmp_path / ".kvbake" / "deploy"


def test_the_defaults(tmp_path: Path) -> None:
    deployment = load_deployment(deployment_file(tmp_path))
    assert (deployment.launcher.timeout_s, deployment.lock_stale_after_s, deployment.start) == (300.0, 900.0, "in-order")
    assert (deployment.readiness, deployment.drafter) == (None, None)


def test_a_fleet_without_a_head_has_none_and_starts_its_workers_first_alone(tmp_path: Path) -> None:
    workers = [node | {"role": "worker"} for node in NODES]
    deployment = load_deployment(deployment_file(tmp_path, nodes=workers, start="workers-first"))
    assert deployment.head() is None
    assert deployment.start_groups() == (("spark-a", "spark-b"),)


def test_a_missing_file_points_to_the_option_and_the_guide(tmp_path: Path) -> None:
    err = refusal(tmp_path / "gone.yaml")
    assert says(err.message, "deployment file gone.yaml not found") and says(err.fix, "pass --deploy PATH")


def test_a_folder_is_unreadable_and_named(tmp_path: Path) -> None:
    (tmp_path / "deploy.yaml").mkdir()
    err = refusal(tmp_path / "deploy.yaml")
    assert says(err.message, "deployment file deploy.yaml unreadable: Is a directory")
    assert says(err.fix, "pass --deploy PATH of a readable file")


def test_every_schema_problem_is_listed_in_path_order(tmp_path: Path) -> None:
    err = refusal(deployment_file(tmp_path, start="later", lock_stale_after_s="soon"))
    assert says(err.message, "deploy.yaml: lock_stale_after_s: 'soon' is not of type 'number'; start: 'later' is not one of")
    assert says(err.fix, "fix the deployment file")


def test_repeated_node_names_are_refused(tmp_path: Path) -> None:
    err = refusal(deployment_file(tmp_path, nodes=[NODES[0], NODES[1] | {"name": "spark-a"}]))
    assert says(err.message, "deploy.yaml: node names repeat") and says(err.fix, "give every node a unique name")


def test_every_reserved_launcher_variable_is_named_in_order(tmp_path: Path) -> None:
    env = {"KVBAKE_IMAGE": "x", "DOCKER_HOST": "y", "MODEL": "m"}
    err = refusal(deployment_file(tmp_path, launcher=LAUNCHER | {"env": env}))
    assert says(err.message, "launcher.env sets DOCKER_HOST, KVBAKE_IMAGE, which kvbake sets itself")
    assert says(err.fix, "remove them; kvbake passes DOCKER_HOST")


def test_a_host_may_name_a_user_but_not_a_password(tmp_path: Path) -> None:
    assert load_deployment(deployment_file(tmp_path)).nodes[0].host == "ssh://ops@spark-a"
    err = refusal(deployment_file(tmp_path, nodes=[NODES[0] | {"host": "ssh://ops:pw@spark-a"}]))
    assert says(err.message, "nodes[0].host holds URL userinfo") and says(err.fix, "remove it from the file")


def test_a_node_launch_is_read_and_its_refusal_names_the_node(tmp_path: Path) -> None:
    launch = {"env": {"NCCL_DEBUG": "INFO"}, "cache_mounts": ["/srv/cache:/root/.cache"]}
    deployment = load_deployment(deployment_file(tmp_path, nodes=[NODES[0] | {"launch": launch}]))
    assert dict(deployment.nodes[0].launch.env) == {"NCCL_DEBUG": "INFO"}
    err = refusal(deployment_file(tmp_path, nodes=[NODES[0] | {"launch": {"cap_add": ["ALL"]}}]))
    assert says(err.message, "deploy.yaml: nodes[spark-a].launch.cap_add gives ALL") and says(err.fix, "name only the capabilities")


def node_with(launch: dict, tmp_path: Path) -> Deployment:
    return load_deployment(deployment_file(tmp_path, nodes=[NODES[0] | {"launch": launch}, NODES[1]]))


def test_a_node_setting_a_switch_is_refused_naming_it(tmp_path: Path) -> None:
    deployment = node_with({"env": {"VLLM_KV_PACK": "1"}}, tmp_path)
    with pytest.raises(ManifestError) as caught:
        check_node_launches(deployment, ("VLLM_KV_PACK",), "/usr/lib/python3/site-packages")
    assert says(caught.value.message, "deploy.yaml: nodes[spark-a].launch.env sets VLLM_KV_PACK")
    assert says(caught.value.fix, "remove it; switches come from the preset")
    assert check_node_launches(deployment, ("OTHER",), "/usr/lib/python3/site-packages") is None


@pytest.mark.parametrize("source_root", ["/srv/cache/py", "/srv/cache/py/"])
def test_a_cache_mount_over_the_sources_is_refused(tmp_path: Path, source_root: str) -> None:
    deployment = node_with({"cache_mounts": ["/host/cache:/srv/cache"]}, tmp_path)
    with pytest.raises(ManifestError) as caught:
        check_node_launches(deployment, (), source_root)
    assert says(caught.value.message, "deploy.yaml: nodes[spark-a].launch.cache_mounts target /srv/cache overlaps")
    assert says(caught.value.message, "(/srv/cache/py)")


def test_without_a_source_root_cache_mounts_are_not_compared(tmp_path: Path) -> None:
    deployment = node_with({"cache_mounts": ["/host/cache:/srv/cache"]}, tmp_path)
    assert check_node_launches(deployment, (), "") is None
