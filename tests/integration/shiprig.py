"""The ship rig shared by the deploy tests: a registry, node A and node B (also reachable through ssh), the stand-in
shipped once; helpers to run commands against it and to snapshot every node's whole state."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kvbake.engines.adapters.client import Engine
from kvbake.errors import EngineError
from kvbake.ship.core.journal import DIVERGED, JOURNAL
from kvbake.ship.adapters.node_locks import LOCK_NAME
from kvbake.ship.adapters.nodestate import NodeState
from kvbake_rig import NodeEngine
from kvbake_rig.serve_shapes import BASE, CONTROL_LENGTH, STANDIN_VLLM, STANDIN_VLLM_DIR, standin_serve  # noqa: F401 (shared with the tests)

from conftest import run

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTAINER = "kvbake-serve"
BAKED = "/usr/local/lib/python3.11/dist-packages/vllm/v1/kv_cache_interface.py"
PACKING_ENV = {"VLLM_DSV41_KV_PAIR=3", "VLLM_DSV41_DROP_MTP_BUFFER=1", "VLLM_EXL3_TF_PROMPT_ALIAS=1",
               "VLLM_EXL3_TF_PROMPT_TRANSIENT=1", "VLLM_INDEXER_PREFILL_BUFFER_FACTOR=4"}
STANDIN_LAUNCHER = [sys.executable, str(REPO_ROOT / "scripts" / "standin_launcher.py")]


def write_deploy(folder: Path, rig: dict, launcher: list[str], env: dict[str, str] | None = None, **extra: Any) -> Path:
    """The rig's deployment file: node A the head, node B (at `rig["b_host"]`) the worker."""
    path = folder / "deploy.yaml"
    path.write_text(json.dumps({
        "format": 1,
        "nodes": [{"name": "spark-a", "host": rig["a"].host, "role": "head", "address": "127.0.0.1"},
                  {"name": "spark-b", "host": rig["b_host"], "role": "worker", "address": "127.0.0.1"}],
        "launcher": {"command": launcher, "container": CONTAINER, "timeout_s": 120, **({"env": env} if env else {})},
        **extra,
    }))
    return path


def ship(capsys, shipped: dict, *argv: str) -> tuple[int, str, str]:
    return run(capsys, *argv, "--manifest", str(shipped["manifest"]), "--deploy", str(shipped["deploy"]))


def ship_with(capsys, shipped: dict, deploy_file: Path, *argv: str) -> tuple[int, str, str]:
    return run(capsys, *argv, "--manifest", str(shipped["manifest"]), "--deploy", str(deploy_file))


def serving_env(node: NodeEngine) -> set[str]:
    return {e for e in Engine(node.host).container_inspect(CONTAINER)["Config"]["Env"] if e.startswith("VLLM_")}


def deploy_control(capsys, shipped, reason: str) -> None:
    code, _, err = ship(capsys, shipped, "deploy", "--preset", "control", "--image", shipped["digest"], "--reason", reason)
    assert code == 0, f"deploy failed: {err}"


def assert_invariant(capsys, shipped, rig, expect_env: set[str]) -> None:
    """Every rank is on one release with one switch set, and verify-running agrees."""
    assert serving_env(rig["a"]) == serving_env(rig["b"]) == expect_env
    code, out, err = ship(capsys, shipped, "status", "--json")
    assert code == 0 and not json.loads(out)["diverged"], out + err
    assert ship(capsys, shipped, "verify-running")[0] == 0


def node_snapshot(node: NodeEngine, name: str, repository: str) -> dict[str, Any]:
    """One node's whole state: the IDs `current` and `previous` name, both records, the journal and diverged mark it
    keeps, its lock marker and what serves (image and switches)."""
    engine = Engine(node.host)
    records = NodeState(name, engine).read()
    serving = engine.container_inspect(CONTAINER)
    return {"current": engine.image_id_of(f"{repository}:current"), "previous": engine.image_id_of(f"{repository}:previous"),
            "records": (records.current.id if records.current else None, records.previous.id if records.previous else None),
            "transition": (records.transition or {}).get("id"), "diverged": records.diverged,
            "lock": engine.container_inspect(LOCK_NAME) is not None,
            "serving": (serving["Image"], sorted(e for e in serving["Config"]["Env"] if e.startswith("VLLM_")),
                        serving["State"]["Running"]) if serving else None}


def fleet_snapshot(rig: dict, shipped: dict, deploy_file: Path | None = None) -> dict[str, Any]:
    """Every node's whole state, plus this host's journal and diverged marker."""
    state = (deploy_file or shipped["deploy"]).parent / ".kvbake" / "deploy"
    return {"a": node_snapshot(rig["a"], "spark-a", shipped["repository"]), "b": node_snapshot(rig["b"], "spark-b", shipped["repository"]),
            "journal": (state / JOURNAL).exists(), "diverged": (state / DIVERGED).exists()}


def reset_nodes(rig: dict, repository: str) -> None:
    """Make both nodes new to kvbake: no serving container, no records, no lock, no current or previous tag."""
    for key in ("a", "b"):
        engine = Engine(rig[key].host)
        for container in (CONTAINER, "kvbake-state", LOCK_NAME):
            engine.remove_container(container)
        for kind in ("current", "previous", "staged"):
            untag_in_use(engine, f"{repository}:{kind}")


def untag_in_use(engine: Engine, reference: str) -> None:
    """Untag `reference`; when a container a walk that failed half-way left behind still uses the image, remove the
    containers made from exactly that image first."""
    try:
        engine.untag(reference)
    except EngineError as err:
        image_id = engine.image_id_of(reference)
        if image_id is None or "is using its referenced image" not in err.message:
            raise
        for container in engine.client.container.list(all=True):
            if container.image == image_id:
                engine.remove_container(container.id)
        engine.untag(reference)
