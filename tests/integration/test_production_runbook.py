"""docs/production.md walked on the stand-in rig: every line of the `console` blocks of §4–§7, in the runbook's order,
as the runbook writes it (doctor, lock from the donor clone, build, deep verify, push, base sync, adopt, deploy with
readiness, validate, rollback to the adopted serve, packing, validate, rollback), each one run for real and followed
by a check of its exit code and the state it leads to.

The only changes to a command are the runbook's own table of rig values (a whole word each: the donor clone's path and
the validation endpoint); nothing is appended. The commands run in the manifest's folder, as an operator runs them."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import httpx
import pytest
import yaml

from kvbake.engines.adapters.client import Engine
from tests.doubles.openai_double import OpenAIDouble

from conftest import run
from shiprig import BAKED, BASE, CONTAINER, PACKING_ENV, STANDIN_LAUNCHER, STANDIN_VLLM, fleet_snapshot, reset_nodes, serving_env, standin_serve, write_deploy

pytestmark = [pytest.mark.docker, pytest.mark.default_engine_only]  # engine-independent: the default engine is enough
ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "docs" / "production.md"
STANDIN = ROOT / "examples" / "standin"
WALKED_SECTIONS = ("4.", "5.", "6.", "7.")
KEPT = f"{CONTAINER}-kvbake-adopted"


# ---------------------------------------------------------------------------------------------------------------
# The runbook, read as written.


def sections() -> dict[str, str]:
    """The runbook's `## ` sections: heading -> body."""
    parts = re.split(r"^## ", RUNBOOK.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]
    return {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in parts}


def runbook_commands() -> list[str]:
    """Every line of the `console` blocks of §4–§7, in order; each must be a kvbake command (nothing is skipped)."""
    lines = []
    for heading, body in sections().items():
        if heading.startswith(WALKED_SECTIONS):
            for block in re.findall(r"^```console\n(.*?)^```$", body, re.MULTILINE | re.DOTALL):
                lines += [line for line in block.splitlines() if line.strip()]
    assert all(line.startswith("kvbake ") for line in lines), f"a walked block holds a line that is not a kvbake command: {lines}"
    return lines


def documented_rig_values() -> list[str]:
    """The runbook values the walk replaces: the first column of the table under "Walk-through on the stand-in rig"."""
    body = next(body for heading, body in sections().items() if heading.startswith("Walk-through on the stand-in rig"))
    return re.findall(r"^\| `([^`]+)` \|", body, re.MULTILINE)


def signature(argv: list[str]) -> str:
    """A step's name: the command (`base sync` whole) and the preset it names."""
    words = argv[:2] if argv[0] == "base" else argv[:1]
    if "--preset" in argv:
        words.append(argv[argv.index("--preset") + 1])
    return " ".join(words)


# ---------------------------------------------------------------------------------------------------------------
# The rig: an operator's checkout of the stand-in, a donor clone, the nodes running the bind-mount serve.


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def operator_checkout(folder: Path, registry: str) -> Path:
    """The stand-in as an operator's checkout holds it: the manifest and its patches, no lock and no overlay yet;
    its release repository in the rig's registry."""
    shutil.copytree(STANDIN, folder, ignore=shutil.ignore_patterns(".kvbake", "manifest.lock.json", "overlay"))
    manifest = folder / "manifest.yaml"
    text = manifest.read_text(encoding="utf-8")
    assert "127.0.0.1:5000/kvbake/standin-kvpack" in text
    manifest.write_text(text.replace("127.0.0.1:5000/kvbake/standin-kvpack", f"{registry}/kvbake/standin-kvpack"), encoding="utf-8")
    return manifest


def donor_clone(folder: Path, manifest: Path) -> Path:
    """A clean git clone holding the chain's patches, committed; the manifest pins its revision."""
    (folder / "patches").mkdir(parents=True)
    for patch in (manifest.parent / "patches").glob("*.patch"):
        shutil.copyfile(patch, folder / "patches" / patch.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
                "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"})
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "the chain"]):
        subprocess.run(["git", "-C", str(folder), *argv], env=env, check=True, capture_output=True)
    revision = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], env=env, check=True, capture_output=True, text=True).stdout.strip()
    pinned = yaml.safe_load(manifest.read_text(encoding="utf-8"))["donor"]["revision"]
    manifest.write_text(manifest.read_text(encoding="utf-8").replace(pinned, revision), encoding="utf-8")
    return folder


def start_bind_mount_serve(rig: dict, env: dict[str, str], patched: Path) -> dict[str, str]:
    """The serve the seed runs on each node: the base image, a patched file bind-mounted over the source, started by
    hand; here the serve stand-in, so that it answers the readiness probe too. Returns each node's container ID."""
    ids = {}
    for key, role in (("a", "head"), ("b", "worker")):
        serve = {"STANDIN_ROLE": role, "STANDIN_API_PORT": env["STANDIN_API_PORT"], "STANDIN_RENDEZVOUS_PORT": env["STANDIN_RENDEZVOUS_PORT"],
                 "STANDIN_WORKERS": "1", "STANDIN_HEAD": "127.0.0.1", "STANDIN_NODE": f"spark-{key}"}
        command = standin_serve()
        ids[key] = rig[key].client().run(BASE, command[1:], entrypoint=command[0], name=CONTAINER, detach=True, networks=["host"],
                                         envs=serve, volumes=[(str(patched), BAKED, "ro")], mounts=[STANDIN_VLLM], restart="unless-stopped").id
    return ids


@dataclass
class Walk:
    """What the checks look at: the rig, the project folder, its deployment file and the bind-mount serve."""

    capsys: pytest.CaptureFixture
    rig: dict
    engine: Engine
    project: Path
    deploy: Path
    repository: str
    api: int
    adopted: dict[str, str]
    rig_values: dict[str, str]
    initial: dict | None = None

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
        return Engine(self.rig[key].host).container_inspect(CONTAINER)

    def kept(self, key: str) -> dict | None:
        return Engine(self.rig[key].host).container_inspect(KEPT)

    def snapshot(self) -> dict:
        return fleet_snapshot(self.rig, {"repository": self.repository}, self.deploy)

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
    manifest = operator_checkout(tmp_path / "kvbake", rig["registry"].address)
    donor = donor_clone(tmp_path / "vllm-patches", manifest)
    api = free_port()
    env = {"STANDIN_SERVE": "1", "STANDIN_API_PORT": str(api), "STANDIN_RENDEZVOUS_PORT": str(free_port()), "STANDIN_DELAY_S": "1"}
    deploy_file = write_deploy(manifest.parent, rig, STANDIN_LAUNCHER, env=env, start="workers-first",
                               readiness={"url": f"http://127.0.0.1:{api}/health", "timeout_s": 60, "interval_s": 0.2})
    assert deploy_file == manifest.parent / "deploy.yaml", "deploy.yaml beside the manifest, as the runbook keeps it"
    patched = tmp_path / "kv_cache_interface.py"
    patched.write_text("# the bind-mounted file of the seed's serve\n")
    adopted = start_bind_mount_serve(rig, env, patched)
    monkeypatch.chdir(manifest.parent)
    with OpenAIDouble() as double:
        yield Walk(capsys, rig, engine, manifest.parent, deploy_file, repository, api, adopted,
                   {"~/src/vllm-patches": str(donor), "http://10.0.0.11:8000": double.url})
    for key in ("a", "b"):
        Engine(rig[key].host).remove_container(KEPT)
    reset_nodes(rig, repository)


# ---------------------------------------------------------------------------------------------------------------
# What each step leads to.


def after_doctor(w: Walk, out: str) -> None:
    assert out and all(line.startswith("ok ") for line in out.splitlines()), out
    assert not (w.project / "manifest.lock.json").exists() and w.snapshot() == w.initial, "doctor changes nothing"


def after_lock(w: Walk, out: str) -> None:
    chain = [entry["id"] for entry in yaml.safe_load((w.project / "manifest.yaml").read_text())["chain"]]
    assert f"imported from the donor: {', '.join(chain)}" in out, out
    assert (w.project / "manifest.lock.json").is_file() and any((w.project / "overlay").rglob("*.py"))


def after_build(w: Walk, out: str) -> None:
    record = w.record("builds")
    assert w.engine.image_id_of(record["image"]) == record["image_id"], "the built image is tagged on the build host"


def after_verify(w: Walk, out: str) -> None:
    assert w.record("builds")["image"] in out, out


def after_push(w: Walk, out: str) -> None:
    assert w.record("pushes")["pinned"].startswith(w.repository + "@sha256:")


def after_base_sync(w: Walk, out: str) -> None:
    for node in ("spark-a", "spark-b"):
        assert re.search(rf"^{node}: (already held it|pulled it) as ", out, re.MULTILINE), out
    for key in ("a", "b"):
        assert Engine(w.rig[key].host).image_id_of(BASE) is not None
    assert w.releases() == ([None, None], [None, None]) and w.snapshot()["a"]["serving"] == w.initial["a"]["serving"]


def after_adopt(w: Walk, out: str) -> None:
    assert w.releases() == (["adopted"] * 2, [None] * 2)
    assert {key: w.serving(key)["Id"] for key in ("a", "b")} == w.adopted, "adopt leaves the serve running as it was"


def on_control_over_adopted(w: Walk, out: str) -> None:
    assert w.releases() == (["control"] * 2, ["adopted"] * 2)
    assert serving_env(w.rig["a"]) == serving_env(w.rig["b"]) == set()
    for key in ("a", "b"):
        kept = w.kept(key)
        assert kept["Id"] == w.adopted[key] and not kept["State"]["Running"], "the adopted serve is kept, stopped"


def validated(preset: str) -> Callable[[Walk, str], None]:
    def check(w: Walk, out: str) -> None:
        report = w.report(preset)
        current = w.status()["nodes"][0]["current"]
        assert report["outcome"] == "passed" and report["stop"] is None and report["rollback"] == "not needed", report
        assert current["preset"] == preset and report["release"]["id"] == current["id"], (report["release"], current)
    return check


def after_rollback_to_adopted(w: Walk, out: str) -> None:
    assert w.releases() == (["adopted"] * 2, ["control"] * 2)
    for key in ("a", "b"):
        serving = w.serving(key)
        assert serving["Id"] == w.adopted[key] and serving["State"]["Running"], "the adopted serve is back"
        assert sorted(m["Destination"] for m in serving["Mounts"]) == ["/opt/kvbake-standin", BAKED] and w.kept(key) is None


def after_packing(w: Walk, out: str) -> None:
    assert w.releases() == (["packing-327680"] * 2, ["control"] * 2)
    assert serving_env(w.rig["a"]) == serving_env(w.rig["b"]) == PACKING_ENV
    for key in ("a", "b"):
        kept = w.kept(key)
        assert kept["Id"] == w.adopted[key] and not kept["State"]["Running"], "the adopted serve stays restorable"


def after_rollback_to_control(w: Walk, out: str) -> None:
    assert w.releases() == (["control"] * 2, ["packing-327680"] * 2)
    assert serving_env(w.rig["a"]) == serving_env(w.rig["b"]) == set()


def after_release(w: Walk, out: str) -> None:
    assert w.releases() == (["control"] * 2, ["packing-327680"] * 2)
    assert w.kept("a") is None and w.kept("b") is None, "adopt --release removed the kept serve"
    assert all(w.serving(key)["State"]["Running"] for key in ("a", "b")), "the serve is untouched"


STEPS: list[tuple[str, Callable[[Walk, str], None]]] = [
    ("doctor", after_doctor),
    ("lock", after_lock),
    ("build", after_build),
    ("verify", after_verify),
    ("push", after_push),
    ("base sync", after_base_sync),
    ("adopt", after_adopt),
    ("deploy control", on_control_over_adopted),
    ("validate control", validated("control")),
    ("rollback", after_rollback_to_adopted),
    ("deploy control", on_control_over_adopted),
    ("deploy packing-327680", after_packing),
    ("validate packing-327680", validated("packing-327680")),
    ("rollback", after_rollback_to_control),
    ("adopt", after_release),
]


def test_the_runbook_walks_from_the_bind_mount_serve_to_packing_and_back(walk: Walk):
    assert sorted(documented_rig_values()) == sorted(walk.rig_values), "the runbook's table of rig values is the walk's"
    commands = runbook_commands()
    steps = [[walk.rig_values.get(word, word) for word in shlex.split(line, comments=True)[1:]] for line in commands]
    assert [signature(step) for step in steps] == [name for name, _ in STEPS]
    used = {word for line in commands for word in shlex.split(line, comments=True)}
    assert set(walk.rig_values) <= used, "every rig value stands for a word of a command"
    walk.initial = walk.snapshot()
    for number, (line, argv, (_, check)) in enumerate(zip(commands, steps, STEPS), 1):
        code, out, err = run(walk.capsys, *argv)
        assert code == 0, f"runbook step {number} ({line}) failed: {out[-1500:]} {err}"
        check(walk, out)
        if argv[0] == "deploy":
            reason = argv[argv.index("--reason") + 1]
            assert {node["current"]["reason"] for node in walk.status()["nodes"]} == {reason}, "the runbook's --reason is recorded"
        health = httpx.get(f"http://127.0.0.1:{walk.api}/health", timeout=5)
        assert health.status_code == 200, f"not serving after step {number} ({line})"
    code, _, err = run(walk.capsys, "verify-running", "--deploy", "deploy.yaml")
    assert code == 0, err
