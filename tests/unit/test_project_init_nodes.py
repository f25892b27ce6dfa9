"""`init` end to end over stand-in node engines: which container it reads on each node, the two files it writes, and the
report (data and lines) it prints; nothing on a node changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fake_engine import FakeEngine
from kvbake.engines.core.procfs import Process
from kvbake.cli import main, parse_args
from kvbake.errors import IntegrityError, RolloutError, UsageError
from kvbake.ship import commands
from kvbake.ship.adapters import project_init

ROOT = "/usr/local/lib/python3.12/dist-packages"
TEMPLATE_IMAGE = "ghcr.io/henryous/deepseek-v41-1017-dgx-spark:v5"
IMAGE_ID = "sha256:" + "a" * 64
DIGEST = "ghcr.io/x/spark@sha256:" + "d" * 64
IMAGE_ENV = ["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all"]
SHARED = ("--max-model-len", "163840", "--port", "9000", "--kv-cache-dtype", "fp8")
HEAD = (*SHARED, "--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.11", "--master-port", "29501")
WORKER = (*SHARED, "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.11", "--master-port", "29501", "--headless")
PACKING = {"VLLM_DSV41_KV_PAIR": "3", "VLLM_DSV41_DROP_MTP_BUFFER": "1", "VLLM_EXL3_TF_PROMPT_TRANSIENT": "1",
           "VLLM_EXL3_TF_PROMPT_ALIAS": "1", "VLLM_INDEXER_PREFILL_BUFFER_FACTOR": "4"}
MODEL_MOUNT = {"Type": "bind", "Source": "/srv/models/m", "Destination": "/models/m", "RW": False}


def node_engine(label: str, args: tuple[str, ...], env: list[str], *, repo_digests: tuple[str, ...] = (DIGEST,),
                tagged: bool = False, execd: bool = False, mounts: tuple[dict, ...] = (MODEL_MOUNT,),
                changes: dict[str, str] | None = None, container: str = "vllm_node") -> FakeEngine:
    """A node whose engine runs the serve in `container` (vLLM as main process, or exec'd beside sleep) and one
    unrelated running container."""
    engine = FakeEngine(label)
    engine.images[IMAGE_ID] = {"Id": IMAGE_ID, "RepoDigests": list(repo_digests), "Config": {"Env": list(IMAGE_ENV)}}
    if tagged:
        engine.tags[TEMPLATE_IMAGE] = IMAGE_ID
    engine.run_serving(container, IMAGE_ID, [*IMAGE_ENV, *env], args, main=("sleep", "infinity") if execd else None,
                       host={"DeviceRequests": [{"Count": -1}], "ShmSize": 16 * 1024 ** 3})
    engine.containers[container].update({"Mounts": list(mounts), "Changes": dict(changes or {})})
    engine.containers[container]["Config"]["Image"] = "spark:v5"
    engine.run_serving("cadvisor", IMAGE_ID, [], main=("sleep", "infinity"))
    engine.containers["cadvisor"]["Processes"] = engine.containers["cadvisor"]["Processes"][:1]
    return engine


@pytest.fixture
def nodes(monkeypatch):
    """Stand-in engines by host; init's adapter reaches them where it would open a docker client."""
    engines: dict[str, FakeEngine] = {}
    monkeypatch.setattr(project_init, "Engine", lambda host: engines[host])
    return engines


def pair(nodes, head_env=(), worker_env=(), **head_options) -> None:
    nodes["ssh://ops@spark-a"] = node_engine("spark-a", HEAD, ["VLLM_HOST_IP=10.0.0.11", *head_env], **head_options)
    nodes["ssh://ops@spark-b"] = node_engine("spark-b", WORKER, ["VLLM_HOST_IP=10.0.0.12", *worker_env])


def run_init(out: Path, *extra: str) -> tuple[dict, str]:
    args = parse_args(["init", "--node", "spark-a=ssh://ops@spark-a", "--node", "spark-b=ssh://ops@spark-b", "--out", str(out), *extra],
                      "build.py")
    return commands.cmd_init(args)


def written(out: Path, name: str) -> dict:
    text = (out / name).read_text()
    assert text.startswith("# Written by `kvbake init`")
    return yaml.safe_load(text)


def test_init_reads_each_nodes_serving_container_and_writes_both_files(nodes, tmp_path):
    pair(nodes, head_env=["HF_HUB_OFFLINE=1", "NCCL_SOCKET_IFNAME=enp1"], worker_env=["HF_HUB_OFFLINE=1", "NCCL_SOCKET_IFNAME=enp2"])
    data, text = run_init(tmp_path, "--registry", "registry.lan:5000")
    manifest, deploy = written(tmp_path, "manifest.yaml"), written(tmp_path, "deploy.yaml")
    assert data["written"] == [str(tmp_path / "manifest.yaml"), str(tmp_path / "deploy.yaml")]
    assert data["containers"] == {"spark-a": "vllm_node", "spark-b": "vllm_node"}
    assert data["base"] == DIGEST and manifest["base"]["image"] == DIGEST
    assert manifest["base"]["source_root"] == ROOT and manifest["chain"]
    assert data["control"] == {"max_model_len": 163840, "launcher_args": ["--port", "9000", "--kv-cache-dtype", "fp8"]}
    assert manifest["presets"]["control"]["max_model_len"] == 163840
    assert manifest["presets"]["packing-327680"]["launcher_args"] == ["--port", "9000", "--kv-cache-dtype", "fp8"]
    assert manifest["output"]["repository"] == "registry.lan:5000/dsv41-kvpack"
    assert [(n["name"], n["host"], n["role"], n["address"], n["container"]) for n in deploy["nodes"]] == [
        ("spark-a", "ssh://ops@spark-a", "head", "10.0.0.11", "vllm_node"), ("spark-b", "ssh://ops@spark-b", "worker", "10.0.0.12", "vllm_node")]
    assert deploy["nodes"][1]["launch"] == {"env": {"NCCL_SOCKET_IFNAME": "enp2"}}
    env = deploy["launcher"]["env"]
    assert (env["MODEL_DIR"], env["VLLM_PORT"], env["SOURCE_ROOT"], env["SHAPE"], env["MASTER_PORT"], env["SHM_SIZE"]) == (
        "/srv/models/m", "9000", ROOT, "main", "29501", "16g")
    assert json.loads(env["CONTAINER_ENV"]) == {"HF_HUB_OFFLINE": "1", "VLLM_HOST_IP": "{node_address}"}
    assert deploy["readiness"]["url"] == "http://10.0.0.11:9000/health"
    assert data["switches"] == {} and data["implied_preset"] == "control"
    assert data["placeholders"] == ["manifest.yaml donor.revision", "deploy.yaml signing.keys"] and data["changes"] == {}
    assert deploy["signing"] == {"require_signature": True, "keys": []}
    lines = text.splitlines()
    assert lines[0].startswith("spark-a: vllm_node (vLLM as its main process), image " + IMAGE_ID[:19])
    assert IMAGE_ID[:20] not in lines[0]
    assert lines[1].startswith("spark-b: vllm_node (vLLM as its main process)")
    assert f"base: {DIGEST} (registry digest)" in lines
    assert "control: max-model-len 163840, arguments: --port 9000 --kv-cache-dtype fp8" in lines
    assert f"wrote {tmp_path / 'manifest.yaml'}, {tmp_path / 'deploy.yaml'}" in lines
    assert any(line.startswith("to fill: manifest.yaml donor.revision: ") and "--donor-revision" in line for line in lines)
    assert lines[-1].startswith("next: python build.py config --check")
    assert not any(line.startswith("switches set") or "writable layer" in line or "code overrides" in line or "mounted over" in line
                   for line in lines)


def test_init_reports_switches_changed_files_overrides_and_files_mounted_over_the_source_root(nodes, tmp_path):
    switches = [f"{k}={v}" for k, v in PACKING.items()]
    changes = {f"{ROOT}/vllm": "C", f"{ROOT}/vllm/a.py": "C", f"{ROOT}/vllm/b.py": "C", f"{ROOT}/vllm/c.py": "C", f"{ROOT}/vllm/d.py": "A",
               "/tmp/scratch": "A"}
    overlay = ({"Type": "bind", "Source": "/home/ops/fix.py", "Destination": f"{ROOT}/vllm/fix.py", "RW": False},
               {"Type": "bind", "Source": "/home/ops/a.py", "Destination": f"{ROOT}/vllm/a.py", "RW": False})
    pair(nodes, head_env=[*switches, "PYTHONPATH=/opt/x", "LD_PRELOAD=/opt/y.so"], worker_env=switches, changes=changes,
         mounts=(MODEL_MOUNT, *overlay))
    data, text = run_init(tmp_path)
    assert data["switches"] == PACKING and data["implied_preset"] == "packing-327680"
    assert data["changes"] == {"spark-a": [f"{ROOT}/vllm/a.py", f"{ROOT}/vllm/b.py", f"{ROOT}/vllm/c.py", f"{ROOT}/vllm/d.py"]}
    assert set(data["placeholders"]) == {"manifest.yaml output.repository", "manifest.yaml donor.revision", "deploy.yaml signing.keys"}
    lines = text.splitlines()
    shown = ",".join(f"{k}={v}" for k, v in sorted(PACKING.items()))
    assert f"switches set in the serve: {shown}: preset packing-327680" in lines
    changed = next(line for line in lines if line.startswith("spark-a: its writable layer changes"))
    assert "changes 4 file(s)" in changed and f"({ROOT}/vllm/a.py, {ROOT}/vllm/b.py, {ROOT}/vllm/c.py)" in changed
    assert "code overrides in the serve's environment (not carried): LD_PRELOAD, PYTHONPATH" in lines
    assert f"files mounted over the source root (the baked chain replaces them): {ROOT}/vllm/a.py, {ROOT}/vllm/fix.py" in lines


def test_a_switch_set_no_preset_has_is_named_as_such(nodes, tmp_path):
    pair(nodes, head_env=["VLLM_DSV41_KV_PAIR=3"], worker_env=["VLLM_DSV41_KV_PAIR=3"])
    data, text = run_init(tmp_path)
    assert data["implied_preset"] is None
    assert "switches set in the serve: VLLM_DSV41_KV_PAIR=3: no preset has this switch set" in text.splitlines()


def test_a_template_base_that_is_the_running_image_is_kept(nodes, tmp_path):
    pair(nodes, tagged=True)
    data, _ = run_init(tmp_path)
    assert written(tmp_path, "manifest.yaml")["base"]["image"] == TEMPLATE_IMAGE
    assert data["base"] == DIGEST


def test_an_image_without_registry_digest_is_pinned_by_reference_and_left_to_base_sync(nodes, tmp_path):
    pair(nodes, repo_digests=())
    for engine in nodes.values():
        engine.images[IMAGE_ID]["RepoDigests"] = []
    data, text = run_init(tmp_path)
    assert data["base"] == "spark:v5"
    assert "base: spark:v5 (no registry digest: lock pins its config digest)" in text.splitlines()
    assert "manifest.yaml base.image (no registry digest)" in data["placeholders"]


def test_an_exec_shape_serve_and_a_named_container_on_every_node(nodes, tmp_path):
    nodes["ssh://ops@spark-a"] = node_engine("spark-a", HEAD, ["VLLM_HOST_IP=10.0.0.11"], execd=True, container="serve")
    nodes["ssh://ops@spark-b"] = node_engine("spark-b", WORKER, ["VLLM_HOST_IP=10.0.0.12"], execd=True, container="serve")
    for engine in nodes.values():  # a second serving container: only the one named is read
        engine.run_serving("other", IMAGE_ID, IMAGE_ENV, SHARED)
    data, text = run_init(tmp_path, "--container", "serve", "--donor-revision", "f" * 40, "--donor-url", "https://d/x",
                          "--launcher", "python3 my_launch.py")
    assert data["containers"] == {"spark-a": "serve", "spark-b": "serve"}
    assert text.splitlines()[0].startswith("spark-a: serve (vLLM started by docker exec)")
    manifest, deploy = written(tmp_path, "manifest.yaml"), written(tmp_path, "deploy.yaml")
    assert manifest["donor"] == {"url": "https://d/x", "revision": "f" * 40}
    assert deploy["launcher"]["command"] == ["python3", "my_launch.py"] and deploy["launcher"]["env"]["SHAPE"] == "exec"
    assert "manifest.yaml donor.revision" not in data["placeholders"]


def test_a_container_named_for_one_node_applies_there_only(nodes, tmp_path):
    pair(nodes)
    nodes["ssh://ops@spark-b"].run_serving("second", IMAGE_ID, ["VLLM_HOST_IP=10.0.0.12"], WORKER)
    with pytest.raises(RolloutError) as caught:
        run_init(tmp_path)
    assert "spark-b has 2 candidate" in caught.value.message
    data, _ = run_init(tmp_path, "--container", "spark-b=second")
    assert data["containers"] == {"spark-a": "vllm_node", "spark-b": "second"}


def test_a_ray_worker_that_runs_no_vllm_is_read_as_a_cluster_node(nodes, tmp_path):
    head = ("--max-model-len", "163840", "--port", "9000", "--distributed-executor-backend", "ray")
    nodes["ssh://ops@spark-a"] = node_engine("spark-a", head, [], execd=True)
    container = nodes["ssh://ops@spark-a"].containers["vllm_node"]
    serve = next(p for p in container["Processes"] if p.pid != 1)
    container["Processes"] = (Process(1, 0, ("ray", "start", "--head", "--port=6380", "--block"), serve.env, "/", "/usr/bin/python3"), serve)
    worker = FakeEngine("spark-b")
    worker.images[IMAGE_ID] = {"Id": IMAGE_ID, "RepoDigests": [DIGEST], "Config": {"Env": list(IMAGE_ENV)}}
    worker.run_serving("ray_node", IMAGE_ID, IMAGE_ENV, main=("ray", "start", "--block", "--address=10.0.0.11:6379"))
    worker.containers["ray_node"]["Processes"] = worker.containers["ray_node"]["Processes"][:1]
    nodes["ssh://ops@spark-b"] = worker
    data, text = run_init(tmp_path)
    assert data["containers"] == {"spark-a": "vllm_node", "spark-b": "ray_node"}
    assert "spark-b: ray_node (a Ray node, no vLLM)" in text
    env = written(tmp_path, "deploy.yaml")["launcher"]["env"]
    assert (env["SHAPE"], env["RAY_PORT"]) == ("ray", "6380")


def test_a_named_container_that_is_not_running_is_refused(nodes, tmp_path):
    pair(nodes)
    nodes["ssh://ops@spark-b"].containers["vllm_node"]["State"] = {"Running": False}
    with pytest.raises(UsageError) as caught:
        run_init(tmp_path, "--container", "vllm_node")
    assert "spark-b has no running container vllm_node" in caught.value.message
    assert "--container spark-b=NAME" in caught.value.fix
    with pytest.raises(UsageError):
        run_init(tmp_path, "--container", "spark-b=gone")
    assert not (tmp_path / "manifest.yaml").exists()


def test_a_serving_container_whose_vllm_is_gone_is_refused(nodes, tmp_path):
    pair(nodes)
    nodes["ssh://ops@spark-b"].containers["vllm_node"]["Processes"] = ()
    with pytest.raises(IntegrityError) as failure:
        run_init(tmp_path, "--container", "vllm_node")
    assert "on spark-b runs no vLLM serve" in failure.value.message


def test_existing_files_are_refused_unless_forced_and_each_is_named(nodes, tmp_path):
    pair(nodes)
    (tmp_path / "manifest.yaml").write_text("kept")
    (tmp_path / "deploy.yaml").write_text("kept")
    with pytest.raises(UsageError) as caught:
        run_init(tmp_path)
    assert f"{tmp_path / 'manifest.yaml'}, {tmp_path / 'deploy.yaml'}" in caught.value.message
    assert caught.value.fix.startswith("run init in a new project folder (--out DIR)")
    assert "already exist" in caught.value.message and "already exists" not in caught.value.message
    (tmp_path / "deploy.yaml").unlink()
    with pytest.raises(UsageError) as caught:
        run_init(tmp_path)
    assert "already exists" in caught.value.message and "--force" in caught.value.fix
    data, _ = run_init(tmp_path, "--force")
    assert written(tmp_path, "manifest.yaml")["base"]["image"] == DIGEST and data["containers"]["spark-a"] == "vllm_node"


def test_a_template_given_is_the_manifest_init_starts_from(nodes, tmp_path):
    pair(nodes)
    template = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifest.yaml").read_text())
    template["name"] = "from-my-template"
    template["switches"] = {"VLLM_DSV41_KV_PAIR": template["switches"]["VLLM_DSV41_KV_PAIR"]}
    template["presets"] = {"control": template["presets"]["control"]}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(template))
    out = tmp_path / "out"
    out.mkdir()
    run_init(out, "--template", str(path))
    manifest = written(out, "manifest.yaml")
    assert manifest["name"] == "from-my-template" and list(manifest["presets"]) == ["control"]


def test_a_malformed_template_names_the_file(nodes, tmp_path, capsys):
    pair(nodes)
    path = tmp_path / "broken.yaml"
    path.write_text("base: [unclosed")
    out = tmp_path / "out"
    out.mkdir()
    assert main(["init", "--node", "spark-a=ssh://ops@spark-a", "--template", str(path), "--out", str(out)]) != 0
    assert "broken.yaml" in capsys.readouterr().err and not (out / "manifest.yaml").exists()


@pytest.mark.parametrize(("given", "named"), [
    (["--node", "a=h", "--node", "a=h2"], "names a twice"),
    (["--node", "a="], "'a='"),
    (["--node", "a=h", "--container", "x", "--container", "y"], "every node twice"),
    (["--node", "a=h", "--container", "b=x", "--container", "c=y"], "b, c"),
    (["--node", "a=h", "--donor-revision", "F" * 40], "--donor-revision"),
    (["--node", "a=h", "--launcher", " "], "--launcher is empty"),
])
def test_malformed_init_options_name_what_is_wrong(given, named, tmp_path):
    args = parse_args(["init", *given, "--out", str(tmp_path)], "build.py")
    with pytest.raises(UsageError) as caught:
        commands.cmd_init(args)
    assert named in caught.value.message


def test_pairs_reads_each_name_once_and_a_bare_value_as_every_node():
    assert commands.pairs(["a=x=y", "b=z"], "--node") == {"a": "x=y", "b": "z"}
    assert commands.pairs(["serve", "b=z"], "--container", bare=True) == {"": "serve", "b": "z"}
    with pytest.raises(UsageError) as caught:
        commands.pairs(["a"], "--node")
    assert "--node 'a'" in caught.value.message and "--node NAME=VALUE" in caught.value.fix


def test_a_serve_with_no_argument_of_its_own_reports_none(nodes, tmp_path):
    nodes["ssh://ops@spark-a"] = node_engine("spark-a", ("--max-model-len", "8192"), [])
    nodes["ssh://ops@spark-b"] = node_engine("spark-b", ("--max-model-len", "8192", "--headless"), [])
    data, text = run_init(tmp_path)
    assert data["control"] == {"max_model_len": 8192, "launcher_args": []}
    assert "control: max-model-len 8192, arguments: (none)" in text.splitlines()


def test_the_manifest_keeps_the_templates_key_order_and_wraps_long_text_at_120_columns(nodes, tmp_path):
    pair(nodes)
    template = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifest.yaml").read_text())
    template["description"] = "xxxx" + " ".join(["word"] * 40)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(template, sort_keys=False))
    out = tmp_path / "out"
    out.mkdir()
    run_init(out, "--template", str(path))
    text = (out / "manifest.yaml").read_text()
    keys = [line.split(":")[0] for line in text.splitlines() if line and not line.startswith((" ", "#", "-"))]
    assert keys == list(template), "the template's order, not sorted"
    first = next(line for line in text.splitlines() if line.startswith("description:"))
    assert first == "description: xxxxword" + " word" * 20, "a 120-column line holds 21 words here, a 121-column one 22"
    assert yaml.safe_load(text)["description"] == template["description"]


def test_a_forbidden_switch_the_serve_sets_is_a_switch_not_part_of_the_containers_environment(nodes, tmp_path):
    pair(nodes, head_env=["VLLM_DSV41_NVFP4_KV=1", "HF_HUB_OFFLINE=1"], worker_env=["VLLM_DSV41_NVFP4_KV=1", "HF_HUB_OFFLINE=1"])
    data, _ = run_init(tmp_path)
    assert data["switches"] == {"VLLM_DSV41_NVFP4_KV": "1"}
    assert json.loads(written(tmp_path, "deploy.yaml")["launcher"]["env"]["CONTAINER_ENV"]) == {
        "HF_HUB_OFFLINE": "1", "VLLM_HOST_IP": "{node_address}"}
