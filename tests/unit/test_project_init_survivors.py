"""`init` on stand-in node engines: a "native" or captured template base, refusals that name the node and the command,
the source roots the ranks import from, a single node, privileged devices, a Ray worker's address, the drafter's
answer, and the served record replaced whole."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fake_engine import serve_process
from kvbake.engines.core.procfs import ImportOrigin, Process
from kvbake.errors import IntegrityError, RolloutError, UsageError
from kvbake.ship.adapters import project_init
from kvbake.ship.adapters.project_init import init_project, read_template
from kvbake.ship.core.init_documents import InitOptions
from test_project_init_nodes import (HEAD, IMAGE_ENV, IMAGE_ID, MODEL_MOUNT, OVERLAY_MOUNTS, ROOT, WORKER, node_engine, nodes,  # noqa: F401
                                     pair, run_init, serving_files, written)

OTHER_ROOT = "/usr/local/lib/python3.11/dist-packages"
HOOK_MOUNT = {"Type": "bind", "Source": "/srv/hooks", "Destination": "/opt/hooks", "RW": False}


def template_with_base(tmp_path: Path, **base: str) -> str:
    """The packaged template with its base's fields set as given, written beside the project folder."""
    document = read_template(None)
    document["base"] = {**document["base"], **base}
    path = tmp_path / "template.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return str(path)


def overlay_pair(nodes) -> None:
    """Both ranks run the same two files mounted over the image under the source root."""
    pair(nodes, mounts=(MODEL_MOUNT, *OVERLAY_MOUNTS))
    nodes["ssh://ops@spark-b"].containers["vllm_node"]["Mounts"] = [MODEL_MOUNT, *OVERLAY_MOUNTS]
    serving_files(nodes)


# ---- the template's base ----

def test_a_native_template_runs_on_any_platform_and_stays_native(nodes, tmp_path):
    pair(nodes)
    out = tmp_path / "out"
    out.mkdir()
    run_init(out, "--template", template_with_base(tmp_path, platform="native"))
    base = written(out, "manifest.yaml")["base"]
    assert base["platform"] == "native" and base["source_root"] == ROOT


def test_the_written_base_is_the_serves_platform_and_source_root_keyed_as_the_template(nodes, tmp_path):
    pair(nodes)
    run_init(tmp_path)
    base = written(tmp_path, "manifest.yaml")["base"]
    assert set(base) == {"image", "platform", "source_root"}
    assert (base["platform"], base["source_root"]) == ("linux/arm64", ROOT)


def test_capture_takes_the_serves_source_root_and_platform_over_a_template_for_another(nodes, tmp_path):
    overlay_pair(nodes)
    out = tmp_path / "out"
    out.mkdir()
    run_init(out, "--capture", "--template", template_with_base(tmp_path, platform="linux/amd64", source_root="/opt/other"))
    base = written(out, "manifest.yaml")["base"]
    assert (base["platform"], base["source_root"]) == ("linux/arm64", ROOT)


def test_a_template_for_another_source_root_is_refused_pointing_at_capture(nodes, tmp_path):
    pair(nodes)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(UsageError) as caught:
        run_init(out, "--template", template_with_base(tmp_path, source_root="/opt/other"))
    assert caught.value.fix is not None and "--capture" in caught.value.fix and "--template" in caught.value.fix


def test_a_template_for_another_platform_is_refused_with_a_fix(nodes, tmp_path):
    pair(nodes)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(UsageError) as caught:
        run_init(out, "--template", template_with_base(tmp_path, platform="linux/amd64"))
    assert "linux/amd64" in caught.value.message and caught.value.fix


# ---- refusals that name the command and the node ----

def test_a_container_that_runs_two_serves_is_refused_by_init_naming_the_node(nodes, tmp_path):
    pair(nodes)
    container = nodes["ssh://ops@spark-b"].containers["vllm_node"]
    container["Processes"] = (*container["Processes"], serve_process(IMAGE_ENV, ("--max-model-len", "4096"), pid=9))
    with pytest.raises(RolloutError) as caught:
        run_init(tmp_path)
    assert "init: spark-b:" in caught.value.message and "run init again" in caught.value.fix


def test_a_start_up_hook_the_image_does_not_hold_is_refused_by_init_naming_the_node(nodes, tmp_path):
    pair(nodes, mounts=(MODEL_MOUNT, HOOK_MOUNT))
    nodes["ssh://ops@spark-a"].origin = ImportOrigin(f"{ROOT}/vllm/__init__.py", (ROOT,), hooks=(("/opt/hooks/sitecustomize.py", "d3"),))
    with pytest.raises(IntegrityError) as caught:
        run_init(tmp_path)
    assert caught.value.message.startswith("init: spark-a: ") and "/opt/hooks/sitecustomize.py" in caught.value.message


def test_mounts_outside_the_source_root_are_each_named_with_a_fix(nodes, tmp_path):
    elsewhere = [{"Type": "bind", "Source": f"/home/ops/{name}.py", "Destination": f"{OTHER_ROOT}/vllm/{name}.py", "RW": False}
                 for name in ("a", "b")]
    pair(nodes, mounts=(MODEL_MOUNT, *elsewhere))
    with pytest.raises(UsageError) as caught:
        run_init(tmp_path)
    assert f"mounts {OTHER_ROOT}/vllm/a.py, {OTHER_ROOT}/vllm/b.py, which" in caught.value.message
    assert caught.value.fix


# ---- where the ranks import vllm from ----

@pytest.mark.parametrize(("origin", "shown"), [
    (ImportOrigin(None, (), error="ModuleNotFoundError: No module named 'vllm'"), "ModuleNotFoundError: No module named 'vllm'"),
    (ImportOrigin("/opt/app/vllm.py", ("/opt/app",)), "/opt/app/vllm.py"),
])
def test_a_rank_whose_vllm_origin_is_no_package_is_refused_naming_pid_node_and_what_it_found(nodes, tmp_path, origin, shown):
    pair(nodes)
    nodes["ssh://ops@spark-b"].origin = origin
    with pytest.raises(IntegrityError) as caught:
        run_init(tmp_path)
    assert "pid 1 on spark-b" in caught.value.message and f"({shown})" in caught.value.message
    assert caught.value.fix


def test_ranks_that_import_vllm_from_two_roots_are_refused_naming_each_node_and_root(nodes, tmp_path):
    pair(nodes)
    nodes["ssh://ops@spark-b"].origin = ImportOrigin(f"{OTHER_ROOT}/vllm/__init__.py", (OTHER_ROOT,))
    with pytest.raises(IntegrityError) as caught:
        run_init(tmp_path)
    message = caught.value.message
    shown = message[message.index("(") + 1:message.rindex(")")]
    assert [part.split()[0] for part in shown.split("; ")] == ["spark-a", "spark-b"]
    assert [part.split()[-1] for part in shown.split("; ")] == [ROOT, OTHER_ROOT]
    assert caught.value.fix


# ---- one node, devices, a Ray worker, a drafter ----

def test_a_single_node_serve_is_captured_and_its_served_record_returned(nodes, tmp_path):
    nodes["ssh://ops@solo"] = node_engine("solo", ("--max-model-len", "8192"), [], mounts=(MODEL_MOUNT, *OVERLAY_MOUNTS))
    serving_files(nodes)
    result = init_project([("solo", "ssh://ops@solo")], {}, tmp_path, None, InitOptions(capture=True), force=False)
    assert result.served_record == tmp_path / ".kvbake" / "served" / "record.json" and result.served_record.is_file()
    chain = written(tmp_path, "manifest.yaml")["chain"]
    assert [c["file"] for c in chain] == ["patches/cap001-vllm-a.patch", "patches/cap002-vllm-fix.patch"]
    assert "-a = 1" in (tmp_path / "patches" / "cap001-vllm-a.patch").read_text().splitlines()


def test_a_privileged_serve_gets_the_rdma_devices_its_own_container_sees(nodes, tmp_path):
    pair(nodes)
    asked = []
    for host, present in (("ssh://ops@spark-a", ("/dev/infiniband",)), ("ssh://ops@spark-b", ())):
        engine = nodes[host]
        engine.containers["vllm_node"]["HostConfig"]["Privileged"] = True
        seen = {engine.containers["vllm_node"]["Id"]: present}

        def existing_paths(container: str, paths: list[str], seen=seen) -> tuple[str, ...]:
            asked.append(list(paths))
            return tuple(path for path in paths if path in seen.get(container, ()))
        engine.existing_paths = existing_paths
    run_init(tmp_path)
    launch = {node["name"]: node.get("launch", {}) for node in written(tmp_path, "deploy.yaml")["nodes"]}
    assert launch["spark-a"]["devices"] == ["/dev/infiniband"] and "devices" not in launch["spark-b"]
    assert asked == [["/dev/infiniband"], ["/dev/infiniband"]]


def test_a_ray_workers_address_is_read_from_its_ray_nodes_environment(nodes, tmp_path):
    head = ("--max-model-len", "163840", "--port", "9000", "--distributed-executor-backend", "ray")
    nodes["ssh://ops@spark-a"] = node_engine("spark-a", head, ["VLLM_HOST_IP=10.0.0.11"], execd=True)
    container = nodes["ssh://ops@spark-a"].containers["vllm_node"]
    serve = next(p for p in container["Processes"] if p.pid != 1)
    container["Processes"] = (Process(1, 0, ("ray", "start", "--head", "--port=6380", "--block"), serve.env, "/", "/usr/bin/python3"), serve)
    worker = node_engine("spark-b", (), ["VLLM_HOST_IP=10.0.0.12"], container="ray_node")
    ray_env = [*IMAGE_ENV, "VLLM_HOST_IP=10.0.0.12"]
    worker.run_serving("ray_node", IMAGE_ID, ray_env, main=("ray", "start", "--block", "--address=10.0.0.11:6379"))
    worker.containers["ray_node"]["Processes"] = worker.containers["ray_node"]["Processes"][:1]
    nodes["ssh://ops@spark-b"] = worker
    data, _ = run_init(tmp_path)
    assert data["containers"] == {"spark-a": "vllm_node", "spark-b": "ray_node"}
    addresses = {node["name"]: node.get("address") for node in written(tmp_path, "deploy.yaml")["nodes"]}
    assert addresses == {"spark-a": "10.0.0.11", "spark-b": "10.0.0.12"}


def test_the_positions_the_drafter_says_it_serves_are_written_for_it(nodes, tmp_path, monkeypatch):
    url = "http://10.0.0.20:8100"
    nodes["ssh://ops@spark-a"] = node_engine("spark-a", (*HEAD, "--spec-url", url), ["VLLM_HOST_IP=10.0.0.11"])
    nodes["ssh://ops@spark-b"] = node_engine("spark-b", (*WORKER, "--spec-url", url), ["VLLM_HOST_IP=10.0.0.12"])
    monkeypatch.setattr(project_init, "served_positions", {url: 327680}.get)
    run_init(tmp_path)
    assert written(tmp_path, "manifest.yaml")["drafter"]["max_positions"] == 327680
    assert written(tmp_path, "deploy.yaml")["drafter"] == {"url": url, "max_positions": 327680}


# ---- the served record's folder ----

def test_a_leftover_of_an_interrupted_init_is_cleared_and_never_recorded(nodes, tmp_path):
    pair(nodes)
    leftover = tmp_path / ".kvbake" / "served.new" / "files" / "vllm"
    leftover.mkdir(parents=True)
    (leftover / "stale.py").write_text("stale = True\n")
    run_init(tmp_path)
    assert not (tmp_path / ".kvbake" / "served.new").exists()
    assert not (tmp_path / ".kvbake" / "served" / "files" / "vllm" / "stale.py").exists()
    assert (tmp_path / ".kvbake" / "served" / "record.json").is_file()


def test_init_again_replaces_the_served_folder_whole(nodes, tmp_path):
    overlay_pair(nodes)
    run_init(tmp_path)
    assert (tmp_path / ".kvbake" / "served" / "files" / "vllm" / "fix.py").is_file()
    nodes.clear()
    pair(nodes)
    data, _ = run_init(tmp_path, "--force")
    assert data["served"] == []
    assert not (tmp_path / ".kvbake" / "served" / "files").exists()
    assert (tmp_path / ".kvbake" / "served" / "record.json").is_file()
