"""Every serve shape the field runs, on two real node engines and the host network: `init` reads it, then with the files
init wrote, as written: adopt it, deploy control, roll back to it, deploy control and packing, roll back to control,
`rollback --to adopted`, each probed for readiness; and a first deploy that fails brings it back. Every step is asserted
on the whole node state: each container by name, what its vLLM serve runs process by process, tags, records."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml

from kvbake.engines.adapters.client import Engine
from kvbake.ship.core.init_documents import LAUNCHER_CONTAINER

from faultscenarios import failing_launcher, killed_run, operator_host
from kvbake_rig.serve_shapes import (RAY_ARGS, RIG_API_KEY, RIG_SECRETS, RIG_TOKEN, SERVED, SHAPES, STANDIN_VLLM, ShapePorts,
                                     multi_node_args, standin_serve, within_this_machines_memlock)
from serveshapes import (NODES, clear_nodes, serves, serving_keys, shape_ports, signed_by_a_reviewer, start_shape, wait_for_serves, whole_node,
                         with_node_containers)
from shiprig import BAKED, BASE, CONTAINER, CONTROL_LENGTH, PACKING_ENV, reset_nodes, run, ship_with

pytestmark = [pytest.mark.docker, pytest.mark.field_engines_only, pytest.mark.once_on_containerd]
# The reference launcher with the stand-in programs in place of vLLM and Ray (the stand-in base runs neither): what
# `init --launcher` names, so that the deployment file init writes is used as written.
STANDIN_REFERENCE_LAUNCHER = f"{sys.executable} {Path(__file__).resolve().parents[2] / 'scripts' / 'standin_reference_launcher.py'}"


@pytest.fixture(scope="module")
def reviewer(shipped, tmp_path_factory) -> Iterator[Path]:
    """A reviewer's key pair, with the shipped release signed by it: init lists the public key, so every deploy of the
    walk checks the signature (cosign reaches the rig's registry only)."""
    yield signed_by_a_reviewer(shipped, tmp_path_factory.mktemp("reviewer"))


@pytest.fixture()
def shape_rig(rig, shipped, monkeypatch):
    reset_nodes(rig, shipped["repository"])
    for name, value in RIG_SECRETS.items():  # where kvbake runs: the secrets a serve was adopted with come from here
        monkeypatch.setenv(name, value)
    yield
    clear_nodes(rig, tuple({name for _, names in SHAPES.values() for name in names.values()}))
    reset_nodes(rig, shipped["repository"])


class Walk:
    """One shape on the rig: the commands an operator runs and the whole state of both nodes after each."""

    def __init__(self, capsys, shipped: dict, rig: dict, tmp_path, shape: str, launcher=None) -> None:
        self.capsys, self.shipped, self.rig = capsys, shipped, rig
        self.names = SHAPES[shape][1]
        host = operator_host(tmp_path, rig, "ops", launcher) if launcher else operator_host(tmp_path, rig, "ops")
        self.deploy_file, self.manifest, self.container = with_node_containers(host, self.names), shipped["manifest"], CONTAINER
        self.ports = shape_ports(tmp_path)
        self.ids = start_shape(rig, shape, self.ports)
        self.serving = serving_keys(shape)
        wait_for_serves(rig, self.names, self.serving)
        self.original = self.state()

    def run(self, *argv: str) -> str:
        code, out, err = run(self.capsys, *argv, "--manifest", str(self.manifest), "--deploy", str(self.deploy_file))
        assert code == 0, f"{argv}: {err}"
        return out

    def init(self, folder, signing_key: Path) -> dict:
        """`init` against both nodes, the containers found by their processes; then `config --check` against what runs.
        From here on the walk uses the files init wrote, as written; the lock beside them is the shipped one (lock,
        build and push of the same chain, which the shipped fixture already ran)."""
        nodes = [f"--node={NODES[key]}={self.rig[key].host}" for key in NODES]
        code, out, err = run(self.capsys, "init", *nodes, "--template", str(self.shipped["manifest"]), "--out", str(folder),
                             "--registry", self.rig["registry"].address, "--launcher", STANDIN_REFERENCE_LAUNCHER,
                             "--signing-key", str(signing_key), "--json")
        assert code == 0, err
        written = json.loads(out)
        shutil.copyfile(self.shipped["manifest"].with_name("manifest.lock.json"), folder / "manifest.lock.json")
        self.manifest, self.deploy_file = folder / "manifest.yaml", folder / "deploy.yaml"
        self.container = yaml.safe_load(self.deploy_file.read_text())["launcher"]["container"]
        code, out, err = run(self.capsys, "config", "--check", "--manifest", str(folder / "manifest.yaml"),
                             "--deploy", str(folder / "deploy.yaml"), "--json")
        assert code == 0, err
        return {"init": written, "check": json.loads(out), "manifest": yaml.safe_load((folder / "manifest.yaml").read_text()),
                "deploy": yaml.safe_load((folder / "deploy.yaml").read_text())}

    def deploy(self, preset: str) -> str:
        return self.run("deploy", "--preset", preset, "--image", self.shipped["digest"], "--reason", preset)

    def serves_the_api(self) -> bool:
        """Whether the head answers its health probe on the host network (the pair serves)."""
        return httpx.get(f"http://127.0.0.1:{self.ports.api}/health", timeout=5).status_code == 200

    def state(self) -> dict:
        names = tuple(sorted({*self.names.values(), CONTAINER, LAUNCHER_CONTAINER}))  # the rig's launcher's, init's
        return {key: whole_node(self.rig, key, self.shipped["repository"], names) for key in NODES}

    def adopted_serves(self, state: dict) -> dict:
        return {key: state[key]["serves"][self.names[key]] for key in NODES}

    def kvbake_serves(self, state: dict) -> set:
        """The switch sets kvbake's serves run (other VLLM_* variables, which init carries from the serve it read, are
        no switches)."""
        names = yaml.safe_load(self.shipped["manifest"].read_text())["switches"]
        return {tuple(sorted({e for p in state[key]["serves"][self.container] for e in p[1] if e[0] in names}))
                for key in self.serving}

    def kvbake_gone(self, state: dict, key: str) -> bool:
        """No kvbake serve on the node: its container is gone, or (under the same name) the adopted serve is back."""
        if self.container == self.names[key]:
            return f"{self.container}-kvbake-adopted" not in state[key]["containers"]
        return self.container not in state[key]["containers"]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_serve_shape_is_adopted_replaced_and_brought_back_exactly(capsys, shipped, rig, tmp_path, shape_rig, shape, reviewer):
    walk = Walk(capsys, shipped, rig, tmp_path, shape)
    original = walk.original
    assert [key for key in NODES if walk.adopted_serves(original)[key]] == list(walk.serving), "the nodes serve in this shape"
    assert walk.serves_the_api(), "the pair serves before kvbake"
    described = walk.init(tmp_path / "project", reviewer)
    assert walk.state() == original, "init changes nothing on the nodes"
    assert described["check"]["nodes"] == {NODES[key]: "control" for key in walk.serving}
    control = described["manifest"]["presets"]["control"]
    served = [*SERVED, "--port", str(walk.ports.api), *(RAY_ARGS if shape == "ray cluster" else ())]
    assert (control["max_model_len"], control["launcher_args"]) == (CONTROL_LENGTH, served)
    assert {n["name"]: n["container"] for n in described["deploy"]["nodes"]} == {NODES[k]: walk.names[k] for k in NODES}
    assert [n["role"] for n in described["deploy"]["nodes"]] == ["head", "worker"]
    assert described["init"]["switches"] == {} and described["init"]["changes"] == {}
    assert described["manifest"]["base"]["image"] == BASE, "the template's pin names the image the nodes run: kept"
    launch = described["deploy"]["launcher"]["env"]
    expected_shape = "ray" if shape == "ray cluster" else "exec" if shape.startswith("eugr cluster") else "main"
    assert (launch["SHAPE"], launch["MODEL_DIR"], launch["VLLM_PORT"]) == (expected_shape, str(walk.ports.model_dir), str(walk.ports.api))
    assert launch.get("RAY_PORT" if shape == "ray cluster" else "MASTER_PORT") == str(walk.ports.ray if shape == "ray cluster" else walk.ports.rendezvous)
    assert described["deploy"]["readiness"]["url"] == f"http://127.0.0.1:{walk.ports.api}/health"
    if shape == "eugr cluster":  # run --privileged: kvbake's serve gets the explicit settings instead, said by init
        privileged = {"cap_add": ["IPC_LOCK"], "ulimits": {"memlock": -1, "stack": 67108864}, "devices": None}
        assert described["init"]["privileged"] == {NODES[key]: privileged for key in NODES}
        assert [{k: n["launch"].get(k) for k in privileged} for n in described["deploy"]["nodes"]] == [privileged] * 2
        memlock = within_this_machines_memlock(walk.deploy_file)
    else:
        memlock = None
    walk.run("adopt", "--reason", shape)
    adopted = walk.state()
    adopted_id = adopted["a"]["records"][0]
    for key in NODES:
        assert adopted[key]["records"] == (adopted_id, None, adopted_id)
        assert adopted[key]["fences"] == 1, "adopt claimed the node: one fence container, never started"
        assert {k: v for k, v in adopted[key]["containers"].items() if k != "kvbake-state"} == {
            **original[key]["containers"], walk.names[key]: (True, "no")}, "its restart policy is off: kvbake starts and stops it now"
        assert adopted[key]["serves"] == original[key]["serves"]
    walk.run("verify-running")
    walk.deploy("control")
    control = walk.state()
    removed = shape == "--rm wrapper"
    for key in NODES:
        name = walk.names[key]
        assert name == walk.container or control[key]["serves"][name] is None
        kept = control[key]["containers"].get(f"{name}-kvbake-adopted")
        assert kept is None if removed else kept == (False, "no"), "set aside, never started at boot"
    for key in walk.serving:  # in the ray shape the worker's container is its Ray node alone
        assert f"--max-model-len {CONTROL_LENGTH}" in " ".join(control[key]["serves"][walk.container][0][0])
        host = Engine(rig[key].host).container_inspect(walk.container)["HostConfig"]
        if shape == "eugr cluster":
            assert (host["Privileged"], [c.removeprefix("CAP_") for c in host["CapAdd"]], sorted((u["Name"], u["Soft"]) for u in host["Ulimits"])) == (
                False, ["IPC_LOCK"], [("memlock", memlock), ("stack", 67108864)]), "never privileged: the explicit settings"
    assert walk.kvbake_serves(control) == {()} and walk.serves_the_api()
    walk.run("rollback")
    back = walk.state()
    assert walk.adopted_serves(back) == walk.adopted_serves(original)
    for key in NODES:
        assert walk.kvbake_gone(back, key) and back[key]["records"] == (adopted_id, control[key]["records"][0], adopted_id)
        assert back[key]["containers"][walk.names[key]] == original[key]["containers"][walk.names[key]], "its restart policy is back"
    walk.deploy("control")
    walk.deploy("packing-327680")
    assert walk.kvbake_serves(walk.state()) == {tuple(sorted(tuple(e.split("=", 1)) for e in PACKING_ENV))}
    walk.run("rollback")
    assert walk.kvbake_serves(walk.state()) == {()}
    walk.run("rollback", "--to", "adopted")
    final = walk.state()
    assert walk.adopted_serves(final) == walk.adopted_serves(original)
    assert all(walk.kvbake_gone(final, key) and final[key]["records"][0] == adopted_id for key in NODES)
    assert walk.serves_the_api(), "the original serve answers again"
    walk.run("verify-running")
    if shape == "eugr cluster, secrets":
        assert json.loads(launch["SECRET_ENV"]) == ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY"]
        assert no_secret_written(walk, tmp_path), "no file, record, journal or audit line holds a secret"


def no_secret_written(walk: Walk, folder: Path) -> bool:
    """Neither this host's files (the project init wrote, the journal, the records) nor any node's state container
    (records, journal copy, audit log) holds the rig's token or API key; the serving containers themselves do."""
    written = [path.read_bytes() for path in folder.rglob("*") if path.is_file()]
    for key in NODES:
        engine = Engine(walk.rig[key].host)
        with tempfile.TemporaryDirectory() as copy:
            if engine.copy_out("kvbake-state", "/kvbake", Path(copy) / "state"):
                written += [path.read_bytes() for path in Path(copy).rglob("*") if path.is_file()]
    assert len(written) > 3, "the walk wrote files to look at"
    return not any(RIG_TOKEN.encode() in data or RIG_API_KEY.encode() in data for data in written)


def started_at(rig: dict, key: str, name: str) -> str | None:
    return ((Engine(rig[key].host).container_inspect(name) or {}).get("State") or {}).get("StartedAt")


@pytest.mark.parametrize("shape", ["main process", "ray cluster", "eugr cluster", "--rm wrapper"])
def test_a_failed_first_deploy_restores_the_whole_gang_in_its_shape(capsys, shipped, rig, tmp_path, shape_rig, shape):
    """Started as init writes it (workers first; a Ray head first), the launcher failing on the worker: in the exec and
    main shapes the head was never touched, and it restarts with its restored worker (its exec'd vLLM run again)."""
    walk = Walk(capsys, shipped, rig, tmp_path, shape, failing_launcher(tmp_path, "spark-b", when_switches=False))
    document = json.loads(walk.deploy_file.read_text())
    walk.deploy_file.write_text(json.dumps({**document, "start": "in-order" if shape == "ray cluster" else "workers-first"}))
    walk.run("adopt", "--reason", shape)
    adopted = walk.state()
    head_started = started_at(rig, "a", walk.names["a"])
    code, _, err = ship_with(capsys, shipped, walk.deploy_file, "deploy", "--preset", "control", "--image", shipped["digest"],
                             "--reason", "fails on spark-b")
    assert code == 12 and "launcher on spark-b exited 1 (launcher: GPU busy)" in err, err
    after = walk.state()
    assert walk.adopted_serves(after) == walk.adopted_serves(walk.original)
    assert started_at(rig, "a", walk.names["a"]) not in (None, head_started), "the head restarted with its worker"
    for key in NODES:
        assert after[key]["records"] == adopted[key]["records"] and CONTAINER not in after[key]["containers"]
        assert after[key]["containers"][walk.names[key]] == walk.original[key]["containers"][walk.names[key]]
    assert walk.serves_the_api()
    walk.run("verify-running")


def failing_once(folder: Path):
    """The main-process shape whose container first runs a wrapper that, once when `folder/fail-once-NODE` exists, exits
    1 after a second (as a Ray worker that cannot reach its head yet), else runs vLLM; under `--restart unless-stopped`
    its own policy restarts it."""
    def start(client, key: str, ports: ShapePorts) -> str:
        serve = " ".join(standin_serve(CONTROL_LENGTH, *SERVED, *ports.serve_args, *multi_node_args(key, ports)))
        wrapper = f"if [ -e /ctl/fail-once-{key} ]; then rm /ctl/fail-once-{key}; sleep 1; exit 1; fi; exec {serve}"
        return client.run(BASE, ["-c", wrapper], entrypoint="sh", name="vllm-policy", detach=True, networks=["host"],
                          restart="unless-stopped", mounts=[STANDIN_VLLM, ports.model_mount,
                                                            ["type=bind", f"source={folder}", "target=/ctl"]]).id
    return start


def test_the_adopted_serve_restarted_once_by_its_own_policy_is_not_a_dead_rank(capsys, shipped, rig, tmp_path, shape_rig, monkeypatch):
    """Brought back by `rollback --to adopted`, the worker's first start fails and its restart policy starts it again (as
    an old Ray worker does while its head comes up), while the head waits for it: the pair serves, and the rollback is no
    failure."""
    control = tmp_path / "ctl"
    control.mkdir()
    monkeypatch.setitem(SHAPES, "policy restart", (failing_once(control), {"a": "vllm-policy", "b": "vllm-policy"}))
    walk = Walk(capsys, shipped, rig, tmp_path, "policy restart")
    walk.run("adopt", "--reason", "policy restart")
    walk.deploy("control")
    document = json.loads(walk.deploy_file.read_text())  # the way back is probed on the adopted serve's own API
    readiness = {"url": f"http://127.0.0.1:{walk.ports.api}/health", "status": 200, "timeout_s": 60, "interval_s": 0.5}
    walk.deploy_file.write_text(json.dumps({**document, "readiness": readiness}))
    (control / "fail-once-b").touch()
    walk.run("rollback", "--to", "adopted")
    assert not (control / "fail-once-b").exists(), "the worker's first start failed"
    assert Engine(rig["b"].host).container_inspect("vllm-policy")["RestartCount"] == 1, "and its policy started it again"
    back = walk.state()
    assert walk.adopted_serves(back) == walk.adopted_serves(walk.original) and walk.serves_the_api()
    assert all(walk.kvbake_gone(back, key) for key in NODES)
    walk.run("verify-running")


def wrapped_exec(client, key: str, ports: ShapePorts) -> str:
    """eugr's shape with vLLM behind a wrapper: on the head `sh -c 'cd /opt && python3 kvbake-standin/vllm serve …'` (the
    serve's working directory is the wrapper's cd), on the worker a gosu-like wrapper that drops to `nobody` and execs."""
    container = client.run(BASE, ["infinity"], entrypoint="sleep", name="vllm_wrap", detach=True, networks=["host"], init=True,
                           mounts=[STANDIN_VLLM, ports.model_mount])
    serve = standin_serve(CONTROL_LENGTH, *SERVED, *ports.serve_args, *multi_node_args(key, ports))
    if key == "a":
        command = ["sh", "-c", "cd /opt && " + " ".join(["python3", "kvbake-standin/vllm", *serve[2:]])]
    else:
        drop = f"import os; os.setgid(65534); os.setuid(65534); os.execvp('python3', {serve!r})"
        command = ["python3", "-c", drop]
    client.container.execute("vllm_wrap", command, detach=True)
    return container.id


def serve_processes(rig: dict, key: str, name: str) -> list[tuple]:
    """Each vLLM serve of the container: command line, working directory, user."""
    from kvbake.serve.core.serve_reading import read_serve

    return [(s.process.argv, s.process.cwd, s.process.uid) for s in read_serve(Engine(rig[key].host).processes(name)).serving]


def test_an_adopted_exec_serve_behind_a_wrapper_comes_back_with_its_working_directory_and_user(capsys, shipped, rig, tmp_path, shape_rig, monkeypatch):
    monkeypatch.setitem(SHAPES, "wrapped exec", (wrapped_exec, {"a": "vllm_wrap", "b": "vllm_wrap"}))
    walk = Walk(capsys, shipped, rig, tmp_path, "wrapped exec")
    before = {key: serve_processes(rig, key, "vllm_wrap") for key in NODES}
    assert before["a"][0][1] == "/opt" and before["b"][0][2] == 65534, "the wrappers' working directory and user"
    walk.run("adopt", "--reason", "wrapped")
    walk.deploy("control")
    walk.run("rollback", "--to", "adopted")
    assert {key: serve_processes(rig, key, "vllm_wrap") for key in NODES} == before
    assert walk.serves_the_api()
    walk.run("verify-running")


def test_a_file_changed_in_the_adopted_serves_container_after_adopt_fails_verify_running(capsys, shipped, rig, tmp_path, shape_rig):
    """A file changed after adopt is named by path on one rank; on the other, a file adopt already found changed (a mod
    copied in before) and edited again is named by its content."""
    walk = Walk(capsys, shipped, rig, tmp_path, "eugr cluster")
    edit = f"open({BAKED!r}, 'a').write('# a mod copied in\\n')"
    Engine(rig["a"].host).client.container.execute(walk.names["a"], ["python3", "-c", edit])
    walk.run("adopt", "--reason", "as it runs")
    walk.run("verify-running")
    Engine(rig["b"].host).client.container.execute(walk.names["b"], ["python3", "-c", edit])
    code, _, err = ship_with(capsys, shipped, walk.deploy_file, "verify-running")
    assert code == 7 and f"spark-b: {BAKED} was changed in the adopted serve's container after adopt" in err, err
    assert "spark-a:" not in err, "the other rank still runs what was adopted"
    Engine(rig["a"].host).client.container.execute(walk.names["a"], ["python3", "-c", edit])
    code, _, err = ship_with(capsys, shipped, walk.deploy_file, "verify-running")
    assert code == 7 and f"spark-a: {BAKED} was edited in the adopted serve's container after adopt (sha256 " in err, err


SECOND_MODEL = "/models/second"


def second_serve(rig: dict, key: str, name: str, running: bool) -> None:
    """Start (or end) a second vLLM serve in the node's serving container, as `docker exec` of another model does."""
    engine = Engine(rig[key].host)
    if running:
        engine.client.container.execute(name, ["python3", "/opt/kvbake-standin/vllm", "serve", SECOND_MODEL], detach=True)
    else:
        kill = ("import os, signal\nfor p in filter(str.isdigit, os.listdir('/proc')):\n    try:\n"
                f"        if int(p) != os.getpid() and b'serve\\0{SECOND_MODEL}' in open(f'/proc/{{p}}/cmdline', 'rb').read():\n"
                "            os.kill(int(p), signal.SIGTERM)\n"
                "    except OSError:\n        pass")
        engine.client.container.execute(name, ["python3", "-c", kill])
    deadline = time.monotonic() + 20
    while (len(serves(engine, name) or ()) == 2) != running:
        assert time.monotonic() < deadline, serves(engine, name)
        time.sleep(0.2)


def test_a_container_running_two_serves_is_refused_by_init_and_adopt_and_fails_verify_running(capsys, shipped, rig, tmp_path, shape_rig, reviewer):
    walk = Walk(capsys, shipped, rig, tmp_path, "eugr cluster")
    name = walk.names["b"]
    second_serve(rig, "b", name, running=True)
    nodes = [f"--node={NODES[key]}={rig[key].host}" for key in NODES]
    code, _, err = run(capsys, "init", *nodes, "--template", str(shipped["manifest"]), "--out", str(tmp_path / "refused"))
    assert code == 12 and f"init: spark-b: 2 vLLM serves run in one container: pid" in err and f"({SECOND_MODEL})" in err, err
    assert not (tmp_path / "refused" / "manifest.yaml").exists()
    code, _, err = ship_with(capsys, shipped, walk.deploy_file, "adopt", "--reason", "two serves")
    assert code == 12 and "adopt: spark-b: 2 vLLM serves run in one container" in err, err
    assert walk.state()["b"]["records"] == (None, None, None), "nothing was adopted"
    second_serve(rig, "b", name, running=False)
    walk.run("adopt", "--reason", "one serve each")
    walk.run("verify-running")
    second_serve(rig, "b", name, running=True)
    code, _, err = ship_with(capsys, shipped, walk.deploy_file, "verify-running")
    assert code == 7 and "spark-b: 2 vLLM serves run in one container" in err and "a GPU node serves one model" in err, err


def hooked_exec(hooks: Path):
    """eugr's shape whose serve runs a `sitecustomize.py` mounted on a PYTHONPATH entry outside the source root: it
    sets a switch after exec, where no process environment shows it."""
    def start(client, key: str, ports: ShapePorts) -> str:
        container = client.run(BASE, ["infinity"], entrypoint="sleep", name="vllm_hook", detach=True, networks=["host"], init=True,
                               envs={"PYTHONPATH": "/opt/hooks"}, mounts=[STANDIN_VLLM, ports.model_mount,
                                                                          ["type=bind", f"source={hooks}", "target=/opt/hooks", "readonly"]])
        serve = standin_serve(CONTROL_LENGTH, *SERVED, *ports.serve_args, *multi_node_args(key, ports))
        client.container.execute("vllm_hook", serve, detach=True)
        return container.id
    return start


USER_HOOK = "/root/.local/lib/python3.11/site-packages/usercustomize.py"


def test_a_start_up_hook_the_image_does_not_hold_is_refused_by_init_and_adopt_and_fails_verify_running(
        capsys, shipped, rig, tmp_path, monkeypatch, shape_rig):
    """A mounted sitecustomize.py outside the source root stops init and adopt before anything is written; in kvbake's
    own serve, a usercustomize.py written into the container fails verify-running. The image's own hook (Debian's
    sitecustomize.py) passes every time."""
    for folder in ("hooks", "hooked", "plain"):
        (tmp_path / folder).mkdir()
    hooks = tmp_path / "hooks"
    (hooks / "sitecustomize.py").write_text("import os\nos.environ['VLLM_DSV41_KV_PAIR'] = '3'\n")
    monkeypatch.setitem(SHAPES, "hooked", (hooked_exec(hooks), {"a": "vllm_hook", "b": "vllm_hook"}))
    walk = Walk(capsys, shipped, rig, tmp_path / "hooked", "hooked")
    nodes = [f"--node={NODES[key]}={rig[key].host}" for key in NODES]
    code, _, err = run(capsys, "init", *nodes, "--template", str(shipped["manifest"]), "--out", str(tmp_path / "refused"))
    mounted = f"the start-up hook /opt/hooks/sitecustomize.py (mounted from {hooks}), which the image does not hold"
    assert code == 7 and f"init: spark-a: its interpreter runs {mounted}" in err and "nothing was written" in err, err
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())
    code, _, err = ship_with(capsys, shipped, walk.deploy_file, "adopt", "--reason", "hooked")
    assert code == 7 and f"adopt: spark-b: its interpreter runs {mounted}" in err, err
    assert walk.state()["b"]["records"] == (None, None, None), "nothing was adopted"
    clear_nodes(rig, ("vllm_hook",))
    walk = Walk(capsys, shipped, rig, tmp_path / "plain", "eugr cluster")
    walk.run("adopt", "--reason", "as it runs")
    walk.deploy("control")
    walk.run("verify-running")
    write = f"import os; os.makedirs({USER_HOOK.rsplit('/', 1)[0]!r}); open({USER_HOOK!r}, 'w').write('import os\\n')"
    Engine(rig["b"].host).client.container.execute(walk.container, ["python3", "-c", write])
    code, _, err = ship_with(capsys, shipped, walk.deploy_file, "verify-running")
    assert code == 7 and (f"spark-b: its interpreter runs the start-up hook {USER_HOOK} (in the container's writable layer), "
                          "which the image does not hold") in err, err
    assert "spark-a:" not in err and "sitecustomize" not in err, "the image's own hook is allowed"
    # A .pth linked into /dev/shm: the link is in the writable layer, its target on a kernel file system.
    linked = USER_HOOK.rsplit("/", 1)[0] + "/switch.pth"
    link = f"import os; os.remove({USER_HOOK!r}); open('/dev/shm/switch.pth', 'w').write('import os\\n'); os.symlink('/dev/shm/switch.pth', {linked!r})"
    Engine(rig["b"].host).client.container.execute(walk.container, ["python3", "-c", link])
    code, _, err = ship_with(capsys, shipped, walk.deploy_file, "verify-running")
    assert code == 7 and f"spark-b: its interpreter runs the start-up hook {linked} (in the container's writable layer)" in err, err
    assert "spark-b: its interpreter runs the start-up hook /dev/shm/switch.pth (on a kernel file system)" in err, err
    # A module the image's own hook imports, planted outside the source root: Debian's sitecustomize.py installs
    # apport_python_hook when it can import it, so a file of that name on sys.path runs at every start.
    planted = "/usr/lib/python3/dist-packages/apport_python_hook.py"
    plant = (f"import os; os.remove({linked!r}); os.makedirs({planted.rsplit('/', 1)[0]!r}, exist_ok=True); "
             f"open({planted!r}, 'w').write('import os\\ndef install():\\n    os.environ[\\'VLLM_DSV41_KV_PAIR\\'] = \\'3\\'\\n')")
    Engine(rig["b"].host).client.container.execute(walk.container, ["python3", "-c", plant])
    code, _, err = ship_with(capsys, shipped, walk.deploy_file, "verify-running")
    assert code == 7 and (f"spark-b: its interpreter runs the start-up hook {planted} (in the container's writable layer), "
                          "which the image does not hold") in err, err


ADOPT_WRITES = 3  # this host's journal, then one retag and record per node


def settled(state: dict) -> dict:
    """A node's state less the containers kvbake keeps for itself (its state container, broken locks kept for audit)."""
    return {key: {**node, "containers": {n: v for n, v in node["containers"].items() if not n.startswith("kvbake-")}}
            for key, node in state.items()}


@pytest.mark.parametrize("at", range(1, ADOPT_WRITES + 1))
def test_a_kill_at_every_step_of_adopt_is_undone_by_revert_or_finished_by_resume(capsys, shipped, rig, tmp_path, shape_rig, at):
    walk = Walk(capsys, shipped, rig, tmp_path, "main process")
    before = settled(walk.original)
    adopt = ["adopt", "--reason", "killed", "--manifest", str(shipped["manifest"]), "--deploy", str(walk.deploy_file)]
    for mode in ("revert", "resume"):
        killed_run(tmp_path, adopt, at)
        code, _, err = ship_with(capsys, shipped, walk.deploy_file, "adopt", "--reason", "blocked")
        assert code == 12 and "adopt --resume" in err, err
        code, _, err = ship_with(capsys, shipped, walk.deploy_file, "adopt", f"--{mode}")
        assert code == 12 and "holds a stale lock" in err and "its process is gone" in err, err
        code, out, err = ship_with(capsys, shipped, walk.deploy_file, "adopt", f"--{mode}", "--break-lock")
        after = settled(walk.state())
        if at == 1 and mode == "resume":  # killed after this host's journal alone: nothing began on any node
            assert code == 12 and "never began" in err and after == before, err
            continue
        assert code == 0, err
        if mode == "revert" or "dropped" in out:
            assert after == before, "the interrupted adopt left nothing behind"
        else:
            adopted = after["a"]["records"][0]
            assert adopted and all(after[key]["records"] == (adopted, None, adopted) and after[key]["transition"] is None
                                   and not after[key]["lock"] for key in NODES)
            assert walk.adopted_serves(after) == walk.adopted_serves(before), "the serve itself was never touched"
            assert all(after[key]["containers"][walk.names[key]] == (True, "no") for key in NODES), "its restart policy is off"
            walk.run("verify-running")
