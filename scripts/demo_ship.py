"""Demo, ship half: push the stand-in image to a local registry, deploy it to a local node, verify, roll back.

Starts the real distribution registry and an independent node engine on loopback (kvbake_rig), loads the stand-in base
onto the node once (a node must already hold the base: kvbake ships only the thin layer), then runs the CLI commands an
operator types and tears everything down. It ships the copy of the stand-in that scripts/demo_standin.sh locked and
built (under .kvbake/demo/, or KVBAKE_DEMO_DIR), never examples/standin itself.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbake.cli import main as kvbake  # noqa: E402
from kvbake.engines.adapters.client import Engine  # noqa: E402
from kvbake_rig import LocalRegistry, NodeEngine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / os.environ.get("KVBAKE_DEMO_DIR", ".kvbake/demo") / "standin" / "manifest.yaml"
BASE = "kvbake-standin/vllm-base:0.33.0"


def step(title: str, *argv: str) -> None:
    print(f"\n== {title}: python build.py {' '.join(argv)}", flush=True)
    code = kvbake(list(argv))
    if code != 0:
        raise SystemExit(code)


def deployment(folder: Path, node: NodeEngine) -> Path:
    path = folder / "deploy.yaml"
    launcher = [sys.executable, str(ROOT / "scripts" / "standin_launcher.py")]
    path.write_text(json.dumps({"format": 1, "nodes": [{"name": "node-1", "host": node.host, "role": "head"}],
                                "launcher": {"command": launcher, "container": "kvbake-serve"}}, indent=1))
    return path


def main() -> int:
    if not MANIFEST.is_file():
        print(f"demo_ship: {MANIFEST} is missing; run bash scripts/demo_standin.sh first (it locks and builds that copy)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="kvbake-demo-") as tmp:
        folder = Path(tmp)
        with LocalRegistry(folder / "registry") as registry, NodeEngine(folder / "node", name="node-1") as node:
            print(f"rig: registry {registry.address}, node-1 {node.host}")
            node.client().image.load(Engine().client.image.save(BASE))
            deploy = str(deployment(folder, node))
            common = ["--manifest", str(MANIFEST)]
            ship = [*common, "--deploy", deploy]
            step("push", "push", *common, "--registry", registry.address)
            step("deploy control", "deploy", *ship, "--preset", "control", "--reason", "demo: inert first")
            step("verify-running, no switch may be set", "verify-running", *ship, "--expect", "")
            step("deploy packing", "deploy", *ship, "--preset", "packing-327680", "--reason", "demo: opt in")
            step("status", "status", *ship)
            step("rollback", "rollback", *ship)
            step("verify-running after rollback", "verify-running", *ship, "--expect", "")
            step("status", "status", *ship)
    print("\nship demo: pushed once, deployed by digest, verified on every rank, rolled back by tag swap")
    return 0


if __name__ == "__main__":
    sys.exit(main())
