"""docs/production.md walked on the stand-in rig: every line of the `console` blocks of §3–§7, in the runbook's order,
as the runbook writes it (init against the nodes that serve, config --check, doctor, lock from the donor clone, build,
deep verify, push, base sync, adopt, deploy with readiness, validate, rollback to the adopted serve, packing, validate,
rollback, adopt --release), each one run for real and followed by a check of its exit code and the state it leads to.

A command changes only by the runbook's own table of rig values (a whole word each: the nodes, the registry, the donor
commit and clone, the project folder, the validation endpoint) and by the two options its table says the rig adds to
init (the stand-in chain and the stand-in programs). The files init writes are used as written; every command from
`cd` on runs in the project's folder, as an operator runs them."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
import pytest
import yaml

from kvbake.engines.adapters.client import Engine
from kvbake_rig.serve_shapes import CONTROL_LENGTH, SERVED, ShapePorts, multi_node_args, run as run_shape, standin_serve
from kvbake.ship.core.init_documents import LAUNCHER_CONTAINER
from tests.doubles.openai_double import OpenAIDouble

from conftest import run
from serveshapes import NODES, chain_overlay, donor_clone, shape_ports, whole_node
from shiprig import BAKED, PACKING_ENV, reset_nodes

pytestmark = [pytest.mark.docker, pytest.mark.default_engine_only]  # engine-independent: the default engine is enough
ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "docs" / "production.md"
STANDIN = ROOT / "examples" / "standin"
WALKED_SECTIONS = ("3.", "4.", "5.", "6.", "7.")
SERVE = LAUNCHER_CONTAINER  # the seed's serve and kvbake's run under the same name
KEPT = f"{SERVE}-kvbake-adopted"
# What the rig adds to init's line (the runbook's table says so): the stand-in chain in place of the production one, and
# the reference launcher with the stand-in programs in place of vLLM (the stand-in base runs no real vLLM).
INIT_ADDITIONS = ["--template", str(STANDIN / "manifest.yaml"),
                  "--launcher", f"{sys.executable} {ROOT / 'scripts' / 'standin_reference_launcher.py'}"]


# ---------------------------------------------------------------------------------------------------------------
# The runbook, read as written.


def sections() -> dict[str, str]:
    """The runbook's `## ` sections: heading -> body."""
    parts = re.split(r"^## ", RUNBOOK.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]
    return {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in parts}


def runbook_commands() -> list[str]:
    """Every line of the `console` blocks of §3–§7, in order; each must be a kvbake command or a `cd` (nothing is
    skipped)."""
    lines = []
    for heading, body in sections().items():
        if heading.startswith(WALKED_SECTIONS):
            for block in re.findall(r"^```console\n(.*?)^```$", body, re.MULTILINE | re.DOTALL):
                lines += [line for line in block.splitlines() if line.strip()]
    assert all(line.startswith(("kvbake ", "cd ")) for line in lines), f"a walked block holds a line that is not a kvbake command: {lines}"
    return lines


def one_block() -> list[str]:
    """The lines of the runbook's one block (`The whole run, in one block`)."""
    body = next(body for heading, body in sections().items() if heading.startswith("The whole run, in one block"))
    (block,) = re.findall(r"^```console\n(.*?)^```$", body, re.MULTILINE | re.DOTALL)
    return [line for line in block.splitlines() if line.strip()]


def walk_through_section() -> str:
    return next(body for heading, body in sections().items() if heading.startswith("Walk-through on the stand-in rig"))


def documented_rig_values() -> list[str]:
    """The runbook values the walk replaces: the first column of the table under "Walk-through on the stand-in rig"."""
    return re.findall(r"^\| `([^`]+)` \|", walk_through_section(), re.MULTILINE)


def signature(argv: list[str]) -> str:
    """A step's name: the command (`base sync` whole) and the preset it names."""
    words = argv[:2] if argv[0] == "base" else argv[:1]
    if "--preset" in argv:
        words.append(argv[argv.index("--preset") + 1])
    return " ".join(words)


# ---------------------------------------------------------------------------------------------------------------
# The rig: a donor clone, and the nodes running the seed's bind-mount serve.


def start_bind_mount_serve(rig: dict, ports: ShapePorts) -> dict[str, str]:
    """The serve the seed runs on each node: the base image started by hand as a two-node vLLM serve (main process,
    the worker headless), the chain's patched files bind-mounted over the source (`ports.overlay`). Returns each
    node's container ID."""
    command = lambda key: standin_serve(CONTROL_LENGTH, *SERVED, *ports.serve_args, *multi_node_args(key, ports))
    return {key: run_shape(rig[key].client(), SERVE, command(key), ports, restart="unless-stopped") for key in NODES}


@dataclass
class Walk:
    """What the checks look at: the rig, the project folder init writes, and the bind-mount serve."""

    capsys: pytest.CaptureFixture
    rig: dict
    engine: Engine
    project: Path
    repository: str
    ports: ShapePorts
    adopted: dict[str, str]
    rig_values: dict[str, str]
    initial: dict = field(default_factory=dict)

    @property
    def deploy(self) -> Path:
        return self.project / "deploy.yaml"

    def status(self) -> dict:
        code, out, err = run(self.capsys, "status", "--json", "--deploy", str(self.deploy))
        assert code == 0, err
        return json.loads(out)

    def releases(self) -> tuple[list[str | None], list[str | None]]:
        """Each node's current and previous preset, as status shows them."""
        nodes = self.status()["nodes"]
        return ([n["current"]["preset"] if n["current"] else None for n in nodes],
                [n["previous"]["preset"] if n["previous"] else None for n in nodes])

    def serving(self, key: str) -> dict:
        return Engine(self.rig[key].host).container_inspect(SERVE)

    def kept(self, key: str) -> dict | None:
        return Engine(self.rig[key].host).container_inspect(KEPT)

    def switches(self, key: str) -> set[str]:
        """The manifest's switches the node's serving container is created with."""
        names = yaml.safe_load((self.project / "manifest.yaml").read_text())["switches"]
        return {e for e in self.serving(key)["Config"]["Env"] if e.split("=", 1)[0] in names}

    def snapshot(self) -> dict:
        return {key: whole_node(self.rig, key, self.repository, (SERVE, KEPT)) for key in NODES}

    def record(self, folder: str) -> dict:
        found = sorted((self.project / ".kvbake" / folder).glob("*.json"))
        assert len(found) == 1, f".kvbake/{folder} holds {[p.name for p in found]}"
        return json.loads(found[0].read_text())

    def report(self, preset: str) -> dict:
        found = sorted((self.project / ".kvbake" / "validate").glob(f"*-{preset}.json"))
        assert found, f"no validation report of {preset}"
        return json.loads(found[-1].read_text())


@pytest.fixture()
def walk(capsys, rig, engine, tmp_path, monkeypatch):
    repository = f"{rig['registry'].address}/kvbake/standin-kvpack"
    reset_nodes(rig, repository)
    donor, revision = donor_clone(tmp_path / "vllm-patches")
    ports = shape_ports(tmp_path, chain_overlay())
    adopted = start_bind_mount_serve(rig, ports)
    project = tmp_path / "dsv41"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSIGN_PASSWORD", "the reviewer's own")
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):  # cosign reaches the rig's registry only
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    with OpenAIDouble() as double:
        yield Walk(capsys, rig, engine, project, repository, ports, adopted,
                   {"spark-a=ssh://ops@spark-a": f"spark-a={rig['a'].host}", "spark-b=ssh://ops@spark-b": f"spark-b={rig['b'].host}",
                    "registry.lan:5000": rig["registry"].address, "<reviewed-donor-commit>": revision, "~/dsv41": str(project),
                    "~/src/vllm-patches": str(donor), "http://10.0.0.11:8000": double.url, "~/reviewers": str(tmp_path / "reviewers"),
                    "~/reviewers/alice.pub": str(tmp_path / "reviewers" / "alice.pub"),
                    "~/reviewers/alice.key": str(tmp_path / "reviewers" / "alice.key")})
    for key in NODES:
        for name in (SERVE, KEPT):
            Engine(rig[key].host).remove_container(name)
    reset_nodes(rig, repository)


# ---------------------------------------------------------------------------------------------------------------
# What each step leads to.


def after_keys(w: Walk, out: str) -> None:
    assert Path(w.rig_values["~/reviewers/alice.pub"]).read_text().startswith("-----BEGIN PUBLIC KEY-----")
    assert w.snapshot() == w.initial


def after_init(w: Walk, out: str) -> None:
    assert (w.project / "manifest.yaml").is_file() and w.deploy.is_file()
    assert w.snapshot() == w.initial, "init changes nothing on the nodes"
    deploy = yaml.safe_load(w.deploy.read_text())
    assert deploy["signing"] == {"require_signature": True, "keys": ["../reviewers/alice.pub"]}
    assert [(n["name"], n["role"], n["container"]) for n in deploy["nodes"]] == [("spark-a", "head", SERVE), ("spark-b", "worker", SERVE)]
    assert deploy["readiness"]["url"] == f"http://127.0.0.1:{w.ports.api}/health"
    manifest = yaml.safe_load((w.project / "manifest.yaml").read_text())
    assert manifest["output"]["repository"] == w.repository and manifest["donor"]["revision"] == w.rig_values["<reviewed-donor-commit>"]
    assert (manifest["presets"]["control"]["max_model_len"], manifest["presets"]["control"]["launcher_args"]) == (
        CONTROL_LENGTH, [*SERVED, *w.ports.serve_args])
    assert BAKED.rsplit("/", 1)[1] in out, f"init names the file the serve mounts over the source: {out}"


def in_project(w: Walk, out: str) -> None:
    assert Path.cwd() == w.project


def after_config_check(w: Walk, out: str) -> None:
    assert "spark-a serves preset control, spark-b serves preset control" in out, out
    assert w.snapshot() == w.initial, "config --check changes nothing"


def after_doctor(w: Walk, out: str) -> None:
    assert out and all(line.startswith("ok ") for line in out.splitlines()), out
    assert not (w.project / "manifest.lock.json").exists() and w.snapshot() == w.initial, "doctor changes nothing"


def after_lock(w: Walk, out: str) -> None:
    chain = [entry["id"] for entry in yaml.safe_load((w.project / "manifest.yaml").read_text())["chain"]]
    assert f"imported from the donor: {', '.join(chain)}" in out, out
    overlay = len(w.ports.overlay)
    assert f"proof: the baked image holds the bytes the serve runs: {overlay} files, sha256 equal" in out.splitlines(), out
    assert (w.project / "manifest.lock.json").is_file() and any((w.project / "overlay").rglob("*.py"))


def after_build(w: Walk, out: str) -> None:
    record = w.record("builds")
    assert w.engine.image_id_of(record["image"]) == record["image_id"], "the built image is tagged on the build host"


def after_verify(w: Walk, out: str) -> None:
    assert w.record("builds")["image"] in out, out


def after_push(w: Walk, out: str) -> None:
    assert w.record("pushes")["pinned"].startswith(w.repository + "@sha256:")


def after_sign(w: Walk, out: str) -> None:
    assert f"signed {w.record('pushes')['pinned']} with alice.key" in out, out


def after_base_sync(w: Walk, out: str) -> None:
    for node in NODES.values():
        assert re.search(rf"^{node}: (already held it|pulled it) as ", out, re.MULTILINE), out
    assert w.releases() == ([None, None], [None, None])
    assert {key: w.serving(key)["Id"] for key in NODES} == w.adopted, "base sync leaves the serve running as it was"


def after_adopt(w: Walk, out: str) -> None:
    assert w.releases() == (["adopted"] * 2, [None] * 2)
    assert {key: w.serving(key)["Id"] for key in NODES} == w.adopted, "adopt leaves the serve running as it was"


def on_control_over_adopted(w: Walk, out: str) -> None:
    assert w.releases() == (["control"] * 2, ["adopted"] * 2)
    assert {node["current"]["signed_by"]["key"] for node in w.status()["nodes"]} == {"alice.pub"}, "the nodes record the signer"
    assert w.switches("a") == w.switches("b") == set()
    for key in NODES:
        kept = w.kept(key)
        assert kept["Id"] == w.adopted[key] and not kept["State"]["Running"], "the adopted serve is kept, stopped"
        assert BAKED not in {m["Destination"] for m in w.serving(key)["Mounts"]}, "kvbake's serve mounts nothing over the source"


def validated(preset: str) -> Callable[[Walk, str], None]:
    def check(w: Walk, out: str) -> None:
        report = w.report(preset)
        current = w.status()["nodes"][0]["current"]
        assert report["outcome"] == "passed" and report["stop"] is None and report["rollback"] == "not needed", report
        assert current["preset"] == preset and report["release"]["id"] == current["id"], (report["release"], current)
    return check


def after_rollback_to_adopted(w: Walk, out: str) -> None:
    assert w.releases() == (["adopted"] * 2, ["control"] * 2)
    for key in NODES:
        serving = w.serving(key)
        assert serving["Id"] == w.adopted[key] and serving["State"]["Running"], "the adopted serve is back"
        assert sorted(m["Destination"] for m in serving["Mounts"]) == sorted(["/opt/kvbake-standin", "/models/standin",
                                                                              *(target for _, target in w.ports.overlay)])
        assert w.kept(key) is None


def after_dry_run(w: Walk, out: str) -> None:
    assert w.releases() == (["adopted"] * 2, [None] * 2) and w.kept("a") is None and w.kept("b") is None
    assert {key: w.serving(key)["Id"] for key in NODES} == w.adopted, "the dry run changes nothing"
    for node in NODES.values():
        assert f"\n{node} (" in out, out
    assert out.count("docker run --detach --name vllm-serve") == 2, out


def after_packing(w: Walk, out: str) -> None:
    assert w.releases() == (["packing-327680"] * 2, ["control"] * 2)
    assert w.switches("a") == w.switches("b") == PACKING_ENV
    for key in NODES:
        kept = w.kept(key)
        assert kept["Id"] == w.adopted[key] and not kept["State"]["Running"], "the adopted serve stays restorable"


def after_rollback_to_control(w: Walk, out: str) -> None:
    assert w.releases() == (["control"] * 2, ["packing-327680"] * 2)
    assert w.switches("a") == w.switches("b") == set()


STEPS: list[tuple[str, Callable[[Walk, str], None]]] = [
    ("keys", after_keys),
    ("init", after_init),
    ("cd", in_project),
    ("config", after_config_check),
    ("doctor", after_doctor),
    ("lock", after_lock),
    ("build", after_build),
    ("verify", after_verify),
    ("push", after_push),
    ("sign", after_sign),
    ("base sync", after_base_sync),
    ("adopt", after_adopt),
    ("deploy control", after_dry_run),
    ("deploy control", on_control_over_adopted),
    ("validate control", validated("control")),
    ("rollback", after_rollback_to_adopted),
    ("deploy control", on_control_over_adopted),
    ("deploy packing-327680", after_packing),
    ("validate packing-327680", validated("packing-327680")),
    ("rollback", after_rollback_to_control),
    ("rollback", after_rollback_to_adopted),
]


def as_walked(line: str, rig_values: dict[str, str]) -> list[str]:
    """A runbook line as the rig runs it: each rig value replaced, whole word by whole word; init gets the rig's two
    additions; `kvbake` itself is dropped (the walk calls its entry point)."""
    words = [rig_values.get(word, word) for word in shlex.split(line, comments=True)]
    argv = words[1:] if words[0] == "kvbake" else words
    return [*argv, *INIT_ADDITIONS] if argv[0] == "init" else argv


def test_the_runbook_walks_from_the_bind_mount_serve_to_packing_and_back(walk: Walk):
    assert sorted(documented_rig_values()) == sorted(walk.rig_values), "the runbook's table of rig values is the walk's"
    assert all(f"`{option}`" in walk_through_section() for option in INIT_ADDITIONS[::2]), "the runbook names what the rig adds to init"
    commands = runbook_commands()
    assert one_block() == commands, "the runbook's one block is every line of §3–§7, in order"
    steps = [as_walked(line, walk.rig_values) for line in commands]
    assert [signature(step) for step in steps] == [name for name, _ in STEPS]
    used = {word for line in commands for word in shlex.split(line, comments=True)}
    assert set(walk.rig_values) <= used, "every rig value stands for a word of a command"
    walk.initial = walk.snapshot()
    assert httpx.get(f"http://127.0.0.1:{walk.ports.api}/health", timeout=5).status_code == 200, "the pair serves before kvbake"
    for number, (line, argv, (_, check)) in enumerate(zip(commands, steps, STEPS), 1):
        if argv[0] == "cd":
            os.chdir(argv[1])
            out = ""
        else:
            code, out, err = run(walk.capsys, *argv)
            assert code == 0, f"runbook step {number} ({line}) failed: {out[-1500:]} {err}"
        check(walk, out)
        if argv[0] == "deploy" and "--dry-run" not in argv:
            reason = argv[argv.index("--reason") + 1]
            assert {node["current"]["reason"] for node in walk.status()["nodes"]} == {reason}, "the runbook's --reason is recorded"
        health = httpx.get(f"http://127.0.0.1:{walk.ports.api}/health", timeout=5)
        assert health.status_code == 200, f"not serving after step {number} ({line})"
    code, _, err = run(walk.capsys, "verify-running", "--deploy", "deploy.yaml")
    assert code == 0, err
