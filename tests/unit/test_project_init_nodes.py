"""`init` end to end over stand-in node engines: which container it reads on each node, the two files it writes, and the
report (data and lines) it prints; nothing on a node changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fake_engine import FakeEngine
from kvbake.engines.core.procfs import ImportOrigin, Process
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
    engine.origin = ImportOrigin(f"{ROOT}/vllm/__init__.py", (ROOT,))
    engine.images[IMAGE_ID] = {"Id": IMAGE_ID, "RepoDigests": list(repo_digests), "Config": {"Env": list(IMAGE_ENV)},
                               "Os": "linux", "Architecture": "arm64"}
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


OVERLAY_MOUNTS = ({"Type": "bind", "Source": "/home/ops/fix.py", "Destination": f"{ROOT}/vllm/fix.py", "RW": False},
                  {"Type": "bind", "Source": "/home/ops/a.py", "Destination": f"{ROOT}/vllm/a.py", "RW": False})
# What each node's container shows at those paths (the mounted bytes, or its writable layer's), and the image's own files.
SERVED = {f"{ROOT}/vllm/fix.py": b"fixed = True\n", f"{ROOT}/vllm/a.py": b"a = 'mounted'\n", f"{ROOT}/vllm/b.py": b"b = 'edited'\n",
          f"{ROOT}/vllm/c.py": b"c = 1\n", f"{ROOT}/vllm/d.py": b"d = 'added'\n"}
IMAGE_FILES = {f"{ROOT}/vllm/a.py": b"a = 1\n", f"{ROOT}/vllm/b.py": b"b = 1\n", f"{ROOT}/vllm/c.py": b"c = 1\n"}


def serving_files(nodes, files=SERVED) -> None:
    """Every node's serving container holds `files`, and its image the image's own files."""
    for engine in nodes.values():
        engine.files["vllm_node"] = dict(files)
        engine.image_files[IMAGE_ID] = dict(IMAGE_FILES)


def test_init_reports_switches_changed_files_overrides_and_files_mounted_over_the_source_root(nodes, tmp_path):
    switches = [f"{k}={v}" for k, v in PACKING.items()]
    changes = {f"{ROOT}/vllm": "C", f"{ROOT}/vllm/a.py": "C", f"{ROOT}/vllm/b.py": "C", f"{ROOT}/vllm/c.py": "C", f"{ROOT}/vllm/d.py": "A",
               "/tmp/scratch": "A"}
    pair(nodes, head_env=[*switches, "PYTHONPATH=/opt/x", "LD_PRELOAD=/opt/y.so"], worker_env=switches, changes=changes,
         mounts=(MODEL_MOUNT, *OVERLAY_MOUNTS))
    nodes["ssh://ops@spark-b"].containers["vllm_node"].update({"Mounts": [MODEL_MOUNT, *OVERLAY_MOUNTS], "Changes": dict(changes)})
    serving_files(nodes)
    data, text = run_init(tmp_path)
    assert data["switches"] == PACKING and data["implied_preset"] == "packing-327680"
    changed = [f"{ROOT}/vllm/a.py", f"{ROOT}/vllm/b.py", f"{ROOT}/vllm/c.py", f"{ROOT}/vllm/d.py"]
    assert data["changes"] == {"spark-a": changed, "spark-b": changed}
    assert set(data["placeholders"]) == {"manifest.yaml output.repository", "manifest.yaml donor.revision", "deploy.yaml signing.keys"}
    lines = text.splitlines()
    shown = ",".join(f"{k}={v}" for k, v in sorted(PACKING.items()))
    assert f"switches set in the serve: {shown}: preset packing-327680" in lines
    changed_line = next(line for line in lines if line.startswith("spark-a: its writable layer changes"))
    assert "changes 4 file(s)" in changed_line and f"({ROOT}/vllm/a.py, {ROOT}/vllm/b.py, {ROOT}/vllm/c.py)" in changed_line
    assert "code overrides in the serve's environment (not carried): LD_PRELOAD, PYTHONPATH" in lines
    # c.py is written back as the image holds it: no difference. a.py is mounted (the mount wins over the layer's copy).
    assert [(f["path"], f["how"], f["base_sha256"] is None) for f in data["served"]] == [
        ("vllm/a.py", "mounted from /home/ops/a.py", False), ("vllm/b.py", "changed in the container's writable layer", False),
        ("vllm/d.py", "changed in the container's writable layer", True), ("vllm/fix.py", "mounted from /home/ops/fix.py", True)]
    record = json.loads((tmp_path / ".kvbake" / "served" / "record.json").read_text())
    assert record["source_root"] == ROOT and record["nodes"] == ["spark-a", "spark-b"] and len(record["files"]) == 4
    assert (tmp_path / ".kvbake" / "served" / "files" / "vllm" / "fix.py").read_bytes() == b"fixed = True\n"
    assert any(line.startswith("served: vllm/fix.py mounted from /home/ops/fix.py, sha256 ") and "not in the image" in line for line in lines)
    assert "lock proves the chain's result equals them byte for byte" in text


def test_ranks_that_run_different_bytes_under_the_source_root_are_refused_naming_the_file(nodes, tmp_path):
    pair(nodes, mounts=(MODEL_MOUNT, *OVERLAY_MOUNTS))
    nodes["ssh://ops@spark-b"].containers["vllm_node"]["Mounts"] = [MODEL_MOUNT, *OVERLAY_MOUNTS]
    serving_files(nodes)
    nodes["ssh://ops@spark-b"].files["vllm_node"][f"{ROOT}/vllm/fix.py"] = b"fixed = False\n"
    with pytest.raises(IntegrityError, match=r"the ranks run different files under the source root \(vllm/fix.py: spark-a [0-9a-f]{12}, spark-b [0-9a-f]{12}\)"):
        run_init(tmp_path)
    assert not (tmp_path / "manifest.yaml").exists() and not (tmp_path / ".kvbake").exists()


def test_a_template_for_another_source_root_or_platform_is_refused_naming_both(nodes, tmp_path):
    pair(nodes)
    for engine in nodes.values():
        engine.origin = ImportOrigin("/usr/local/lib/python3.11/dist-packages/vllm/__init__.py", ())
    with pytest.raises(UsageError, match="template's base.source_root is /usr/local/lib/python3.12/dist-packages, but the serve imports "
                                         "vllm from /usr/local/lib/python3.11/dist-packages"):
        run_init(tmp_path)
    for engine in nodes.values():
        engine.origin = ImportOrigin(f"{ROOT}/vllm/__init__.py", ())
        engine.images[IMAGE_ID]["Architecture"] = "amd64"
    with pytest.raises(UsageError, match="template's base.platform is linux/arm64, but the serve's image is linux/amd64"):
        run_init(tmp_path)
    assert not (tmp_path / "manifest.yaml").exists()


def test_a_mounted_python_file_outside_the_serves_source_root_is_refused(nodes, tmp_path):
    elsewhere = {"Type": "bind", "Source": "/home/ops/a.py", "Destination": "/usr/local/lib/python3.11/dist-packages/vllm/a.py", "RW": False}
    pair(nodes, mounts=(MODEL_MOUNT, elsewhere))
    with pytest.raises(UsageError, match=r"spark-a mounts /usr/local/lib/python3.11/dist-packages/vllm/a.py, which is not under the "
                                         rf"source root the serve imports vllm from \({ROOT}\): that code never runs"):
        run_init(tmp_path)


def test_capture_writes_one_patch_per_served_file_as_the_chain(nodes, tmp_path):
    pair(nodes, mounts=(MODEL_MOUNT, *OVERLAY_MOUNTS))
    nodes["ssh://ops@spark-b"].containers["vllm_node"]["Mounts"] = [MODEL_MOUNT, *OVERLAY_MOUNTS]
    serving_files(nodes)
    data, text = run_init(tmp_path, "--capture")
    chain = written(tmp_path, "manifest.yaml")["chain"]
    assert [(c["id"], c["file"], c["role"]) for c in chain] == [("cap001", "patches/cap001-vllm-a.patch", "captured"),
                                                                ("cap002", "patches/cap002-vllm-fix.patch", "captured")]
    assert chain[1]["summary"].startswith("captured from the serve: vllm/fix.py (mounted from /home/ops/fix.py), sha256 ")
    patch = (tmp_path / "patches" / "cap002-vllm-fix.patch").read_text()
    assert "new file mode 100644" in patch and "+fixed = True" in patch and "diff --git a/vllm/fix.py b/vllm/fix.py" in patch
    assert "the captured chain bakes exactly these bytes" in text and "manifest.yaml donor.revision" not in data["placeholders"]


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
    (["--node", "a=h", "--container", "b=xx", "--container", "c=yy"], "b, c"),
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


def test_capture_of_a_serve_that_runs_its_image_unchanged_is_refused(nodes, tmp_path):
    pair(nodes)
    with pytest.raises(UsageError, match="init --capture: the serve runs no file over its image under the source root"):
        run_init(tmp_path, "--capture")
    assert not (tmp_path / "manifest.yaml").exists() and not (tmp_path / "patches").exists()


def test_a_file_deleted_under_the_source_root_is_refused_naming_it(nodes, tmp_path):
    pair(nodes, changes={f"{ROOT}/vllm/gone.py": "D"})
    with pytest.raises(UsageError, match=rf"init: vllm_node deleted {ROOT}/vllm/gone.py under the source root in its writable layer"):
        run_init(tmp_path)


def test_a_serve_with_a_token_and_an_api_key_is_written_with_their_names_only(nodes, tmp_path):
    token, key = "hf_" + "Zz09" * 9, "sk-local-0123456789abcdef"
    head = (*HEAD, "--api-key", key)
    nodes["ssh://ops@spark-a"] = node_engine("spark-a", head, ["VLLM_HOST_IP=10.0.0.11", f"HF_TOKEN={token}"])
    nodes["ssh://ops@spark-b"] = node_engine("spark-b", (*WORKER, "--api-key", key), ["VLLM_HOST_IP=10.0.0.12", f"HF_TOKEN={token}"])
    data, text = run_init(tmp_path)
    deploy = written(tmp_path, "deploy.yaml")
    assert json.loads(deploy["launcher"]["env"]["SECRET_ENV"]) == ["HF_TOKEN", "VLLM_API_KEY"]
    assert "--api-key" not in written(tmp_path, "manifest.yaml")["presets"]["control"]["launcher_args"]
    everything = b"".join(path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()) + text.encode() + json.dumps(data).encode()
    assert token.encode() not in everything and key.encode() not in everything
    assert "secrets (by name only; export them where kvbake deploy runs): HF_TOKEN, VLLM_API_KEY" in text.splitlines()


def test_another_option_whose_value_looks_like_a_credential_is_refused(nodes, tmp_path):
    pair(nodes)
    for host in nodes:
        process = nodes[host].containers["vllm_node"]["Processes"][0]
        nodes[host].containers["vllm_node"]["Processes"] = (type(process)(process.pid, process.ppid, (*process.argv, "--tokenizer", "hf_" + "Q1" * 18),
                                                                         process.env, process.cwd, process.exe),)
    with pytest.raises(IntegrityError, match="init: the serve's --tokenizer value looks like a credential"):
        run_init(tmp_path)
    assert not (tmp_path / "deploy.yaml").exists()
