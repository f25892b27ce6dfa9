"""Real vLLM in the loop: the serving stand-in baked, pushed, its base synced to a node and deployed there with the
reference launcher; its capacity line predicted and read back, the supervised plan passed, the seeded faults caught."""

# One node engine, one rank: vLLM 0.32's CPU path cannot run one tensor-parallel group across two processes as two
# nodes, and a second replica would double the 3.8 GB base on the nodes and the start-up time on two cores. The two-node
# paths run with the serve stand-in (test_ship_ready.py and the fleet tests). The module runs in file order on that
# node: the failing first deploys leave it serving nothing, then the happy path, then the seeded prefix-reuse fault.

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml

from kvbake.bake.core.chain import read_patch
from kvbake.cli import main
from kvbake.ship.core.init_documents import LAUNCHER_CONTAINER
from kvbake.bake.core.switch_coverage import check_coverage
from kvbake.engines.adapters.client import Engine
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.bake.core.plan import read_overlay
from kvbake_rig import LocalRegistry, NodeEngine
from kvbake_rig import realserve as rs
from kvbake_rig.ports import free_port

from conftest import run

pytestmark = [pytest.mark.docker, pytest.mark.default_engine_only]

UNKNOWN = "Unknown vLLM environment variable detected"
CONTROL_LINE = "CPU KV cache size: 32,768 tokens, Maximum concurrency for 4,096 tokens per request: 8.00x"
PACKING_LINE = "CPU KV cache size: 65,536 tokens, Maximum concurrency for 4,096 tokens per request: 16.00x"
TOO_LONG = """  too-long:
    status: validated
    max_model_len: 16384
    switches: {}
    launcher_args: ["--block-size", "128", "--dtype", "float32", "--kv-cache-memory-bytes", "67108864", "--enforce-eager"]
    note: "longer than the model's 8,192 positions: vLLM refuses to start"
"""


@dataclass(frozen=True)
class RealServe:
    """The project, its model, the node and the one-node deployment."""

    manifest: Path
    model: rs.TinyModel
    deploy: Path
    port: int
    folder: Path
    node: Engine
    registry: str

    def ship(self, *argv: str, deploy: Path | None = None) -> list[str]:
        return [*argv, "--manifest", str(self.manifest), "--deploy", str(deploy or self.deploy)]


@pytest.fixture(scope="module")
def realserve(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServe]:
    folder = tmp_path_factory.mktemp("realserve")
    rs.require_base(engine)
    model = rs.tiny_model(folder / "corpus")
    manifest = rs.project_copy(folder)
    manifest.write_text(manifest.read_text().replace("output:", TOO_LONG + "output:"))  # a runtime section: no re-lock
    if not rs.lock_matches_local_base(manifest, engine):  # a base built on another machine: re-pin this one
        assert main(["lock", "--manifest", str(manifest), "--rebase-base"]) == 0
    with pytest.MonkeyPatch.context() as patch, LocalRegistry(rs.registry_root()) as registry, \
            NodeEngine(folder / "node", name="node-a") as node:
        # a reviewer's key signs the release and the deployment requires it (cosign reaches the registry only)
        for name, value in {"COSIGN_PASSWORD": "the reviewer's own", "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
                            "NO_PROXY": "127.0.0.1,localhost"}.items():
            patch.setenv(name, value)
        assert main(["keys", "--out", str(folder / "reviewer"), "--name", "reviewer"]) == 0
        repository = f"{registry.address}/kvbake/realserve-kvpack"
        port = free_port()
        deploy = rs.deployment(folder, model, port, node.host, signing={"require_signature": True, "keys": ["reviewer/reviewer.pub"]})
        try:
            for argv in (["build"], ["push", "--registry", registry.address, "--sign", str(folder / "reviewer" / "reviewer.key")],
                         ["base", "sync", "--registry", registry.address, "--deploy", str(deploy)]):
                assert main([*argv, "--manifest", str(manifest)]) == 0, argv[0]
            yield RealServe(manifest, model, deploy, port, folder, Engine(node.host), registry.address)
        finally:
            rs.untag_release(engine, repository)


def status_of(capsys: pytest.CaptureFixture, serve: RealServe) -> dict:
    code, out, err = run(capsys, *serve.ship("status", "--json"))
    assert code == 0, err
    return json.loads(out)


def assert_serving_nothing(capsys: pytest.CaptureFixture, serve: RealServe) -> None:
    """A failed first deploy leaves no serving container and no current release on the node."""
    assert serve.node.container_inspect(rs.CONTAINER) is None
    status = status_of(capsys, serve)
    (node,) = status["nodes"]
    assert node["current"] is None and node["previous"] is None and not node["recorded_current_missing"], node
    assert not status["diverged"] and status["marked_diverged"] is None and status["pending_journal"] is None, status


def assert_failed_deploy(capsys: pytest.CaptureFixture, serve: RealServe, argv: list[str], *fragments: str) -> str:
    code, _, err = run(capsys, *argv)
    assert code == 12 and err.count("\n") == 1, err
    assert all(fragment in err for fragment in fragments), err
    assert_serving_nothing(capsys, serve)
    return err


def test_a_model_folder_missing_on_the_node_fails_the_first_deploy(capsys, realserve) -> None:
    missing = rs.deployment(realserve.folder, realserve.model, realserve.port, realserve.node.host,
                            name="missing-model.yaml", model_dir="/srv/kvbake-no-such-model")
    assert_failed_deploy(capsys, realserve, realserve.ship("deploy", "--preset", "control", deploy=missing),
                         "bind source path does not exist: /srv/kvbake-no-such-model")


def test_a_preset_longer_than_the_model_stops_the_serve_and_is_reverted(capsys, realserve) -> None:
    code, _, err = run(capsys, "capacity", "too-long", "--manifest", str(realserve.manifest),
                       "--model-config", str(realserve.model.config), "--device", "cpu")
    assert code == 17 and "max_model_len 16,384 is above the model's max_position_embeddings 8,192" in err
    assert_failed_deploy(capsys, realserve, realserve.ship("deploy", "--preset", "too-long"),
                         f"the serving container {rs.CONTAINER} on node-a", "max_model_len")


def test_a_switch_that_crashes_start_up_is_reverted(capsys, realserve) -> None:
    argv = realserve.ship("deploy", "--preset", "crash-at-start", "--allow-held", "--reason", "seeded start-up fault")
    assert_failed_deploy(capsys, realserve, argv, f"the serving container {rs.CONTAINER} on node-a",
                         "VLLM_KVBAKE_PACK_FACTOR")


def test_a_serve_that_never_answers_its_readiness_probe_is_reverted(capsys, realserve) -> None:
    never = rs.deployment(realserve.folder, realserve.model, realserve.port, realserve.node.host, name="never-ready.yaml",
                          readiness_port=free_port(), readiness_timeout_s=20)
    assert_failed_deploy(capsys, realserve, realserve.ship("deploy", "--preset", "control", deploy=never),
                         "the serve never became ready", "within 20 s")


def capacity(capsys: pytest.CaptureFixture, serve: RealServe, preset: str) -> str:
    code, out, err = run(capsys, "capacity", preset, "--manifest", str(serve.manifest), "--model-config",
                         str(serve.model.config), "--device", "cpu", "--deploy", str(serve.deploy))
    assert code == 0, err
    return out


def validate(capsys: pytest.CaptureFixture, serve: RealServe, preset: str, *extra: str) -> tuple[int, str, str]:
    return run(capsys, *serve.ship("validate", "--preset", preset, *rs.validate_args(serve.model, serve.port), *extra))


def assert_step(capsys: pytest.CaptureFixture, serve: RealServe, argv: list[str], expected_out: str = "") -> str:
    code, out, err = run(capsys, *argv)
    assert code == 0 and expected_out in out, err or out
    return out


def answer(serve: RealServe, prompt: str) -> str:
    body = {"model": rs.SERVED_NAME, "prompt": prompt, "max_tokens": 8, "temperature": 0}
    response = httpx.post(f"http://127.0.0.1:{serve.port}/v1/completions", json=body, timeout=60)
    response.raise_for_status()
    return response.json()["choices"][0]["text"]


def idle_cores() -> int:
    """The cores the last minute's load average leaves idle (none on a machine other work already keeps busy)."""
    return max(0, (os.cpu_count() or 1) - round(os.getloadavg()[0]))


@contextmanager
def cpu_load() -> Iterator[None]:
    """The machine fully loaded while the block runs: a busy loop on every core that other work leaves idle (on every
    core when the test runs alone; none in a run whose other passes already load every core)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(idle_cores())]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def report_of(serve: RealServe, out: str) -> dict:
    """The JSON report a validate run named on its last line."""
    shown = out.strip().splitlines()[-1].split()[1]
    return json.loads((serve.manifest.parent / shown).read_text())


def assert_forced_pressure(report: dict, pool_blocks: int) -> None:
    """The pressure step derived its requests from the pool the serve reported, and the serve preempted."""
    (pressure,) = [step for step in report["steps"] if step["name"] == "pressure"]
    data, derivation = pressure["data"], pressure["data"]["derivation"]
    assert pressure["passed"] and data["preemptions"] >= 1, pressure
    assert (derivation["pool_source"], derivation["pool_blocks"], derivation["block_size"]) == \
        ("vllm:cache_config_info", pool_blocks, 128), derivation
    assert derivation["forced"] and derivation["demand_blocks"] > derivation["usable_blocks"] == pool_blocks - 1, derivation
    assert data["requests"] == derivation["requests"] == len(derivation["prompt_tokens"]) > derivation["admitted_at_least"]
    assert max(derivation["prompt_tokens"]) + derivation["max_tokens"] <= 4096, derivation


def assert_page(serve: RealServe, out: str) -> None:
    """The HTML page beside the JSON report: MemAvailable charted per node, the pressure step's admissions and preemptions."""
    shown = out.strip().splitlines()[-1].split()[1]
    page = ET.fromstring((serve.manifest.parent / shown).with_suffix(".html").read_text())
    (chart,) = page.iter("{http://www.w3.org/2000/svg}svg")
    assert chart.findall("{http://www.w3.org/2000/svg}polyline"), "a line per watched node"
    text = "".join(page.itertext())
    assert "Pool pressure" in text and "admitted together, at least" in text and "preemptions counted" in text


def test_control_then_packing_then_rollback_on_real_vllm(capsys, realserve) -> None:
    prompt = json.loads((realserve.model.corpus / "opinions_cl.jsonl").read_text().splitlines()[0])["text"][:400]
    assert_step(capsys, realserve, realserve.ship("deploy", "--preset", "control", "--reason", "inert first"))
    assert status_of(capsys, realserve)["nodes"][0]["current"]["signed_by"]["key"] == "reviewer.pub", "the signed release was checked"
    assert_step(capsys, realserve, realserve.ship("verify-running", "--expect", ""), "all ranks agree")
    assert f"node-a: {CONTROL_LINE}" in capacity(capsys, realserve, "control")
    control_answer = answer(realserve, prompt)
    assert control_answer.strip()
    with cpu_load():
        code, out, err = validate(capsys, realserve, "control")
    assert code == 0 and "oracle:   identity (auto" in out and "PASSED" in out, err or out
    assert_forced_pressure(report_of(realserve, out), 256)
    assert_page(realserve, out)

    assert_step(capsys, realserve, realserve.ship("deploy", "--preset", "packing-x2", "--reason", "opt in"))
    assert_step(capsys, realserve, realserve.ship("verify-running", "--expect", "VLLM_KVBAKE_PACK_FACTOR=2"), "all ranks agree")
    assert UNKNOWN not in realserve.node.container_logs(rs.CONTAINER), "the chain registers the switch"
    assert f"node-a: {PACKING_LINE}" in capacity(capsys, realserve, "packing-x2")
    with cpu_load():
        code, out, err = validate(capsys, realserve, "packing-x2")
    assert code == 0 and "PASSED" in out, err or out
    assert_forced_pressure(report_of(realserve, out), 512)

    assert_step(capsys, realserve, realserve.ship("rollback"), "rolled back every rank")
    assert_step(capsys, realserve, realserve.ship("verify-running", "--expect", ""), "all ranks agree")
    assert f"node-a: {CONTROL_LINE}" in capacity(capsys, realserve, "control")
    assert answer(realserve, prompt) == control_answer


def test_the_seeded_reuse_fault_stops_validation_and_rolls_back(capsys, realserve) -> None:
    held = ("--allow-held", "--reason", "seeded fault: validation must stop")
    assert_step(capsys, realserve, realserve.ship("deploy", "--preset", "fault-reuse", *held))
    code, _, err = validate(capsys, realserve, "fault-reuse", *held, "--rollback-on-failure")
    assert code == 15 and err.count("\n") == 1, err
    assert err.startswith("error (validation stop): prefix identity: incorrect output: hit output"), err
    assert_step(capsys, realserve, realserve.ship("verify-running", "--expect", ""), "all ranks agree")
    assert status_of(capsys, realserve)["nodes"][0]["current"]["preset"] == "control"


def base_serve_log(engine: Engine, model: rs.TinyModel, env: dict[str, str], wanted: str, timeout_s: float = 180) -> str:
    """Start the base image (no chain) with `env` until its log shows `wanted` (or the time is up); its log."""
    mount = [["type=bind", f"source={model.folder}", "target=/models/served", "readonly"]]
    container = engine.client.run(rs.BASE, ["-m", "vllm.entrypoints.openai.api_server", "--model", "/models/served",
                                            "--max-model-len", "4096", "--dtype", "float32", "--enforce-eager"],
                                  entrypoint="python3", detach=True, envs={"HF_HUB_OFFLINE": "1", **env},
                                  networks=["none"], mounts=mount, shm_size="1g", name="kvbake-realserve-base-probe")
    try:
        deadline = time.monotonic() + timeout_s
        while wanted not in (log := engine.container_logs(container.id)) and time.monotonic() < deadline:
            time.sleep(1)
        return log
    finally:
        engine.remove_container(container.id)


def test_the_chain_registers_its_switch_so_neither_kvbake_nor_vllm_warns(engine, realserve) -> None:
    manifest = load_manifest(realserve.manifest)
    patches = {p.id: read_patch(p)[1] for p in manifest.chain}
    tree = read_overlay(manifest, read_lock(manifest))
    report = check_coverage(manifest, patches, tree)
    assert report.ok and report.warnings == () and {"VLLM_KVBAKE_PACK_FACTOR", "VLLM_KVBAKE_FAULT_REUSE"} <= set(report.reads)
    unregistered = check_coverage(manifest, patches, {k: v for k, v in tree.items() if k != "vllm/envs.py"})
    assert len(unregistered.warnings) == 1 and "VLLM_KVBAKE_FAULT_REUSE, VLLM_KVBAKE_PACK_FACTOR may be unregistered" in unregistered.warnings[0]
    log = base_serve_log(engine, realserve.model, {"VLLM_KVBAKE_PACK_FACTOR": "2"}, UNKNOWN)
    assert f"{UNKNOWN}: VLLM_KVBAKE_PACK_FACTOR" in log, "without the chain vLLM does not know the switch"


# ---------------------------------------------------------------------------------------------------------------
# The exec shape on real vLLM: init reads a serve started by docker exec; verify-running reads kvbake's own exec-shape
# serve process by process and catches what only the processes show.

SHADOW = "/root/.cache/kvbake-shadow"


def serving_processes(engine: Engine, container: str) -> tuple:
    from kvbake.serve.core.serve_reading import read_serve

    return read_serve(engine.processes(container)).serving


def wait_for_serving(engine: Engine, container: str, present: bool = True, timeout_s: float = 60) -> tuple:
    """The container's vLLM serve processes once some run (or, with present False, once none does)."""
    deadline = time.monotonic() + timeout_s
    while bool(found := serving_processes(engine, container)) != present:
        assert time.monotonic() < deadline, f"{container}: vLLM serve {'never started' if present else 'still runs'}"
        time.sleep(0.5)
    return found


def restart_serve(engine: Engine, container: str, argv: list[str], env: dict[str, str], workdir: str | None = None) -> None:
    """Stop the vLLM serve docker exec started in the container and start it again as an operator would by hand."""
    stop_serve(engine, container)
    engine.exec_detached(container, argv, env, workdir, None)
    wait_for_serving(engine, container)


def stop_serve(engine: Engine, container: str) -> None:
    """SIGTERM to each serve's root; a serve still starting may hold it back (vLLM sets its handlers late), and on a
    loaded machine past any fair wait, so what still runs after 20 s is killed, root and descendants."""
    roots = {serving.root.pid for serving in serving_processes(engine, container)}
    signal_processes(engine, container, roots, 15)
    try:
        wait_for_serving(engine, container, present=False, timeout_s=20)
    except AssertionError:
        processes = engine.processes(container)
        signal_processes(engine, container, descendants(processes, roots), 9)
        wait_for_serving(engine, container, present=False)


def descendants(processes: list, roots: set[int]) -> set[int]:
    """The pids of the roots and of every process below them."""
    found, grew = set(roots), True
    while grew:
        below = {p.pid for p in processes if p.ppid in found} - found
        found, grew = found | below, bool(below)
    return found


def signal_processes(engine: Engine, container: str, pids: set[int], signal: int) -> None:
    """Send the signal to each pid inside the container; one already gone is no error."""
    script = f"import os\nfor pid in {sorted(pids)}:\n    try: os.kill(pid, {signal})\n    except ProcessLookupError: pass"
    engine.exec_in(container, ["python3", "-c", script])


def shadow_package(folder: Path) -> Path:
    """A `vllm` package whose API server module only waits: started from this folder, `python3 -m` imports it, not the
    baked vllm."""
    module = folder / "vllm" / "entrypoints" / "openai"
    module.mkdir(parents=True)
    for package in (folder / "vllm", folder / "vllm" / "entrypoints", module):
        (package / "__init__.py").write_text("")
    (module / "api_server.py").write_text("import time\ntime.sleep(3600)\n")
    return folder


def exec_shape_deployment(serve: RealServe, shadow: Path) -> Path:
    document = json.loads(serve.deploy.read_text())
    document["launcher"]["env"]["SHAPE"] = "exec"
    document["nodes"][0]["launch"] = {"cache_mounts": [f"{shadow}:{SHADOW}"]}
    path = serve.folder / "deploy-exec.yaml"
    path.write_text(json.dumps(document))
    return path


def node_new_to_kvbake(node: Engine) -> None:
    """The node as one that never ran kvbake: no serving container, records, lock or release tags (the base stays)."""
    from kvbake.ship.adapters.node_locks import LOCK_NAME

    for container in (rs.CONTAINER, "kvbake-state", LOCK_NAME):
        node.remove_container(container)
    for image in node.client.image.list():
        for tag in image.repo_tags:
            if tag.rsplit(":", 1)[0].endswith("/kvbake/realserve-kvpack"):
                node.untag(tag)


def test_init_reads_an_exec_shape_serve_and_verify_running_catches_what_its_processes_show(capsys, realserve, tmp_path) -> None:
    node, port = realserve.node, free_port()
    node_new_to_kvbake(node)  # init reads a serve kvbake never deployed
    args = ["--model", "/models/served", "--served-model-name", rs.SERVED_NAME, "--max-model-len", "4096", "--dtype", "float32",
            "--enforce-eager", "--block-size", "128", "--kv-cache-memory-bytes", "67108864", "--host", "127.0.0.1", "--port", str(port)]
    current = node.image_id_of(rs.BASE)  # base sync put the base there; the serve by hand runs it, as the seed's does
    assert current, "base sync tagged the base on the node"
    node.client.run(current, ["infinity"], entrypoint="sleep", name="vllm_node", detach=True, networks=["host"],
                    mounts=[["type=bind", f"source={realserve.model.folder}", "target=/models/served", "readonly"]])
    try:
        node.exec_detached("vllm_node", ["python3", "-m", "vllm.entrypoints.openai.api_server", *args], {"HF_HUB_OFFLINE": "1"}, None, None)
        wait_for_serving(node, "vllm_node")
        code, out, err = run(capsys, "init", f"--node=node-a={node.host}", "--container", "vllm_node", "--template",
                             str(realserve.manifest), "--out", str(tmp_path / "project"), "--json")
        assert code == 0, err
        described = json.loads(out)
        assert described["control"] == {"max_model_len": 4096, "launcher_args": [a for a in args[2:] if a not in ("--max-model-len", "4096")]}
        assert described["containers"] == {"node-a": "vllm_node"} and described["switches"] == {}
        code, out, err = run(capsys, "config", "--check", "--manifest", str(tmp_path / "project" / "manifest.yaml"),
                             "--deploy", str(tmp_path / "project" / "deploy.yaml"), "--json")
        assert code == 0 and json.loads(out)["nodes"] == {"node-a": "control"}, err
    finally:
        node.remove_container("vllm_node")

    deploy = exec_shape_deployment(realserve, shadow_package(tmp_path / "shadow"))
    assert_step(capsys, realserve, realserve.ship("deploy", "--preset", "control", "--reason", "exec shape", deploy=deploy))
    assert_step(capsys, realserve, realserve.ship("verify-running", deploy=deploy), "all ranks agree")
    (serving,) = serving_processes(node, rs.CONTAINER)
    assert serving.execd, "kvbake's launcher started vLLM by docker exec"
    argv, env = list(serving.process.argv), {"HF_HUB_OFFLINE": "1"}

    restart_serve(node, rs.CONTAINER, argv, {**env, "VLLM_KVBAKE_PACK_FACTOR": "2"})
    code, _, err = run(capsys, *realserve.ship("verify-running", deploy=deploy))
    assert code != 0 and "node-a" in err and "VLLM_KVBAKE_PACK_FACTOR is 2" in err, err

    restart_serve(node, rs.CONTAINER, argv, env, workdir=SHADOW)
    code, _, err = run(capsys, *realserve.ship("verify-running", deploy=deploy))
    assert code != 0 and "node-a" in err and f"{SHADOW}/vllm" in err, err

    restart_serve(node, rs.CONTAINER, argv, env)
    assert_step(capsys, realserve, realserve.ship("verify-running", deploy=deploy), "all ranks agree")
    changed = tmp_path / "envs.py"
    assert node.copy_out(rs.CONTAINER, f"{rs.SOURCE_ROOT}/vllm/envs.py", changed)
    changed.write_text(changed.read_text() + "\n# changed in the running container\n")
    node.copy_in(changed, rs.CONTAINER, f"{rs.SOURCE_ROOT}/vllm/envs.py")
    code, _, err = run(capsys, *realserve.ship("verify-running", deploy=deploy))
    assert code != 0 and "node-a" in err and "vllm/envs.py" in err, err


# ---------------------------------------------------------------------------------------------------------------
# The seed's starting point on real vLLM, exec shape: a chain file bind-mounted over the source root, a token in the
# exec'd serve's environment. A second serve and a start-up hook are refused by init; init --capture and lock prove the
# baked image holds the mounted bytes; adopt records the serve by the token's name only; a file copied in after adopt
# fails verify-running.

HOOKS = "/opt/hooks"
REAL_TOKEN_NAME = "HF_TOKEN"
REAL_TOKEN = "hf_" + "kvbakeRealServeRigOnly" * 2  # shaped like a token; never a real one


def kill_serve(engine: Engine, container: str, port: int) -> None:
    """End the vLLM serve of the container that listens on `port` (its `docker exec` root process)."""
    for serving in serving_processes(engine, container):
        if str(port) in serving.process.argv:
            engine.exec_in(container, ["python3", "-c", f"import os; os.kill({serving.root.pid}, 15)"])
    deadline = time.monotonic() + 60
    while any(str(port) in s.process.argv for s in serving_processes(engine, container)):
        assert time.monotonic() < deadline, f"the serve on port {port} still runs"
        time.sleep(0.5)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def served_args(port: int) -> list[str]:
    return ["--model", "/models/served", "--served-model-name", rs.SERVED_NAME, "--max-model-len", "4096", "--dtype", "float32",
            "--enforce-eager", "--block-size", "128", "--kv-cache-memory-bytes", "67108864", "--host", "127.0.0.1", "--port", str(port)]


def test_the_seeds_overlay_on_real_vllm_is_read_refused_captured_and_adopted(capsys, realserve, tmp_path, monkeypatch) -> None:
    node, port, second = realserve.node, free_port(), free_port()
    node_new_to_kvbake(node)
    monkeypatch.setenv(REAL_TOKEN_NAME, REAL_TOKEN)  # where kvbake runs: the adopted serve's token comes from here
    chain_result = read_overlay(load_manifest(realserve.manifest), read_lock(load_manifest(realserve.manifest)))
    overlay = tmp_path / "overlay"
    for path, data in chain_result.items():  # every file the chain touches, bind-mounted as the seed's overlay is
        (overlay / path).parent.mkdir(parents=True, exist_ok=True)
        (overlay / path).write_bytes(data)
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text("import os\nos.environ['VLLM_KVBAKE_PACK_FACTOR'] = '2'\n")
    mounts = [["type=bind", f"source={realserve.model.folder}", "target=/models/served", "readonly"],
              *(["type=bind", f"source={overlay / path}", f"target={rs.SOURCE_ROOT}/{path}", "readonly"] for path in sorted(chain_result)),
              ["type=bind", f"source={tmp_path / 'hooks'}", f"target={HOOKS}", "readonly"]]
    node.client.run(node.image_id_of(rs.BASE), ["infinity"], entrypoint="sleep", name="vllm_node", detach=True, networks=["host"],
                    mounts=mounts, shm_size="1g")  # vLLM's engine core needs more /dev/shm than Docker's 64 MiB
    serve = ["python3", "-m", "vllm.entrypoints.openai.api_server", *served_args(port)]
    env = {"HF_HUB_OFFLINE": "1", REAL_TOKEN_NAME: REAL_TOKEN}
    init = ["init", f"--node=node-a={node.host}", "--container", "vllm_node", "--template", str(realserve.manifest)]
    try:
        node.exec_detached("vllm_node", serve, env, None, None)
        wait_for_serving(node, "vllm_node")

        node.exec_detached("vllm_node", ["python3", "-m", "vllm.entrypoints.openai.api_server", *served_args(second)], env, None, None)
        deadline = time.monotonic() + 60
        while len(serving_processes(node, "vllm_node")) < 2:
            assert time.monotonic() < deadline, "the second serve never appeared"
            time.sleep(0.5)
        code, _, err = run(capsys, *init, "--out", str(tmp_path / "two"))
        assert code == 12 and "init: node-a: 2 vLLM serves run in one container" in err, err
        assert not (tmp_path / "two" / "manifest.yaml").exists()
        kill_serve(node, "vllm_node", second)

        restart_serve(node, "vllm_node", serve, {**env, "PYTHONPATH": HOOKS})
        code, _, err = run(capsys, *init, "--out", str(tmp_path / "hooked"))
        assert code == 7 and f"its interpreter runs the start-up hook {HOOKS}/sitecustomize.py (mounted from {tmp_path / 'hooks'})" in err, err
        assert not (tmp_path / "hooked" / "manifest.yaml").exists()
        restart_serve(node, "vllm_node", serve, env)

        project = tmp_path / "project"
        code, out, err = run(capsys, *init, "--out", str(project), "--capture", "--json", "--registry", realserve.registry,
                             "--signing-key", str(realserve.folder / "reviewer" / "reviewer.pub"), "--launcher", rs.launch_vllm_command())
        assert code == 0, err
        found = json.loads(out)
        assert [(f["path"], f["how"]) for f in found["served"]] == [(path, f"mounted from {overlay / path}") for path in sorted(chain_result)]
        code, out, err = run(capsys, "lock", "--manifest", str(project / "manifest.yaml"))
        assert code == 0, err
        assert f"proof: the baked image holds the bytes the serve runs: {len(chain_result)} files, sha256 equal" in out.splitlines(), out
        deploy = project / "deploy.yaml"
        assert json.loads(yaml.safe_load(deploy.read_text())["launcher"]["env"]["SECRET_ENV"]) == [REAL_TOKEN_NAME]
        written = [p.read_bytes() for p in project.rglob("*") if p.is_file()]
        assert written and not any(REAL_TOKEN.encode() in data for data in written), "the token is written by name only"

        deadline = time.monotonic() + 240  # the mounted chain files run: the serve answers
        while not answers(f"http://127.0.0.1:{port}/health"):
            assert time.monotonic() < deadline, "the serve with the mounted overlay never answered"
            time.sleep(1)
        code, out, err = run(capsys, "adopt", "--reason", "the seed's serve", "--manifest", str(project / "manifest.yaml"), "--deploy", str(deploy))
        assert code == 0, err
        ship = ("--manifest", str(project / "manifest.yaml"), "--deploy", str(deploy))
        assert run(capsys, "verify-running", *ship)[0] == 0
        # the walk an operator makes from here, on real vLLM: bake what runs, serve it, and come back to the adopted serve
        for argv in (("build",), ("push", "--sign", str(realserve.folder / "reviewer" / "reviewer.key"))):
            code, _, err = run(capsys, *argv, "--manifest", str(project / "manifest.yaml"))
            assert code == 0, f"{argv}: {err}"
        code, _, err = run(capsys, "deploy", "--preset", "control", "--reason", "the baked overlay", *ship)
        assert code == 0, err
        assert answers(f"http://127.0.0.1:{port}/health") and run(capsys, "verify-running", *ship)[0] == 0
        kept = node.container_inspect("vllm_node-kvbake-adopted")
        assert kept is not None and not kept["State"]["Running"], "the adopted serve waits, stopped, under its kept name"
        code, _, err = run(capsys, "rollback", "--to", "adopted", *ship)
        assert code == 0, err
        (serving,) = serving_processes(node, "vllm_node")
        assert serving.execd and serving.process.env.get(REAL_TOKEN_NAME) == REAL_TOKEN, "its vLLM exec'd again, its token given back"
        assert answers(f"http://127.0.0.1:{port}/health") and run(capsys, "verify-running", *ship)[0] == 0
        changed, target = tmp_path / "logger.py", f"{rs.SOURCE_ROOT}/vllm/logger.py"
        assert node.copy_out("vllm_node", target, changed)
        changed.write_text(changed.read_text() + "\n# another mod copied in after adopt\n")
        node.copy_in(changed, "vllm_node", target)
        code, _, err = run(capsys, "verify-running", *ship)
        assert code == 7 and f"node-a: {target} was changed in the adopted serve's container after adopt" in err, err
    finally:
        node.remove_container("vllm_node")
        node.remove_container("vllm_node-kvbake-adopted")
        node.remove_container(LAUNCHER_CONTAINER)  # the serving container of the deployment init wrote
        node_new_to_kvbake(node)
