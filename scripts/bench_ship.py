"""Benchmark the ship path on the stand-in: bytes pushed and pulled for a new release when the base is already present
(against a full `docker save | docker load` transfer), rollback time per node without the launcher and bytes pulled by
it, and verify-running over two nodes. Prints figures; asserts no timing.

    python scripts/bench_ship.py [--repeats 5] [--profile docker-26.1-containerd]

With --profile, the build engine and both nodes run that engine profile.

Bytes pulled are read from the registry's own access log (the sum of `http.response.written` of the requests served
during a pull), so they are what really crossed the wire.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbake.cli import main as kvbake  # noqa: E402
from kvbake.engines.adapters.client import Engine  # noqa: E402
from kvbake_rig import LocalRegistry, NodeEngine  # noqa: E402
from kvbake_rig.profile_engine import profile_engine  # noqa: E402
from kvbake_rig.recipes import EngineRecipe, recipe_named  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BASE = "kvbake-standin/vllm-base:0.33.0"
WRITTEN = re.compile(r"http\.response\.written=(\d+)")


def served_bytes(log: Path, start: int) -> tuple[int, int]:
    text = log.read_text(errors="replace")
    return sum(int(m) for m in WRITTEN.findall(text[start:])), len(text)


def quiet(*argv: str) -> None:
    code = kvbake(list(argv))
    if code != 0:
        raise SystemExit(f"build.py {argv[0]} failed with {code}")


def timed_launcher(folder: Path) -> tuple[Path, Path]:
    """A launcher wrapper that appends its own duration, so rollback time can exclude it."""
    durations = folder / "launcher-seconds.txt"
    wrapper = folder / "launcher.py"
    wrapper.write_text(
        "import subprocess, sys, time\n"
        f"start = time.perf_counter()\ncode = subprocess.call([sys.executable, {str(ROOT / 'scripts/standin_launcher.py')!r}])\n"
        f"open({str(durations)!r}, 'a').write(f'{{time.perf_counter() - start}}\\n')\nsys.exit(code)\n")
    return wrapper, durations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", help="engine profile of the build engine and the nodes (default: the default engine's)")
    args = parser.parse_args()
    if args.profile:
        with profile_engine(args.profile, [BASE]) as engine:
            return measure(engine, args.repeats, recipe_named(args.profile))
    return measure(Engine(), args.repeats, None)


def measure(engine: Engine, repeats: int, recipe: EngineRecipe | None) -> int:
    print(f"engine: {engine.profile().describe()}")
    with tempfile.TemporaryDirectory(prefix="kvbake-bench-ship-") as tmp:
        folder = Path(tmp)
        with LocalRegistry(folder / "registry") as registry, NodeEngine(folder / "a", name="a", recipe=recipe) as node_a, \
                NodeEngine(folder / "b", name="b", recipe=recipe) as node_b:
            log = registry.root / "registry.log"
            project = folder / "standin"
            shutil.copytree(ROOT / "examples" / "standin", project, ignore=shutil.ignore_patterns(".kvbake"))
            manifest = project / "manifest.yaml"
            repository = f"{registry.address}/kvbake/standin-kvpack"
            manifest.write_text(manifest.read_text().replace("127.0.0.1:5000/kvbake/standin-kvpack", repository))
            quiet("lock", "--manifest", str(manifest), "--rebase-base")  # this machine's own stand-in base
            quiet("build", "--manifest", str(manifest))
            engine.tag(BASE, f"{repository}:base")
            engine.client.image.push(f"{repository}:base", quiet=True)
            _, mark = served_bytes(log, 0)
            for node in (node_a, node_b):
                # Nodes pull the base once from this registry, so their engines know its compressed blobs.
                node.client().image.pull(f"{repository}:base", quiet=True)
                node.client().image.tag(f"{repository}:base", BASE)
            base_pulled, mark = served_bytes(log, mark)
            print(f"one-time base pull on 2 nodes: {base_pulled} bytes")
            quiet("push", "--manifest", str(manifest))
            record = json.loads(next((project / ".kvbake" / "pushes").glob("*.json")).read_text())
            launcher, durations = timed_launcher(folder)
            deploy = folder / "deploy.yaml"
            deploy.write_text(json.dumps({"format": 1, "launcher": {"command": [sys.executable, str(launcher)], "container": "serve"},
                                          "nodes": [{"name": "a", "host": node_a.host, "role": "head"}, {"name": "b", "host": node_b.host, "role": "worker"}]}))
            ship = ["--manifest", str(manifest), "--deploy", str(deploy)]
            _, mark = served_bytes(log, 0)
            quiet("deploy", *ship, "--preset", "control", "--reason", "bench")
            pulled, mark = served_bytes(log, mark)
            saved = sum(len(chunk) for chunk in engine.client.image.save(record["image_id"]))
            pulled_ids = {Engine(node.host).container_inspect("serve")["Image"] for node in (node_a, node_b)}
            print(f"image IDs on the nodes: {', '.join(sorted(i[:19] for i in pulled_ids))} (config digest {record['config_digest'][:19]})")
            print(f"push of a new release, base already in the registry: {record['uploaded_bytes']} bytes uploaded; "
                  f"thin layer compressed {record['thin_layer_compressed_bytes']} bytes "
                  f"({record['uploaded_bytes'] / record['thin_layer_compressed_bytes']:.2f}x, config included)")
            print(f"pull on 2 nodes that hold the base: {pulled} bytes served by the registry "
                  f"({pulled / 2 / record['thin_layer_compressed_bytes']:.2f}x the compressed thin layer per node)")
            print(f"full docker save | docker load transfer of the same image: {saved} bytes per node "
                  f"({saved / max(pulled / 2, 1):.0f}x more)")
            quiet("deploy", *ship, "--preset", "packing-327680", "--reason", "bench")
            _, mark = served_bytes(log, 0)  # what that deploy's phase 1 fetched is not the rollbacks' doing
            rollbacks, verifies, pulled_by_rollbacks = [], [], 0
            for _ in range(repeats):
                durations.write_text("")
                start = time.perf_counter()
                quiet("rollback", *ship)
                total = time.perf_counter() - start
                launched = sum(float(x) for x in durations.read_text().split())
                rollbacks.append((total - launched) / 2)
                served, mark = served_bytes(log, mark)
                pulled_by_rollbacks += served
                start = time.perf_counter()
                quiet("verify-running", *ship)
                verifies.append(time.perf_counter() - start)
            print(f"rollback per node without the launcher: median {statistics.median(rollbacks):.2f} s "
                  f"(includes the verify-running of both ranks); bytes pulled by {repeats} rollbacks: {pulled_by_rollbacks}")
            print(f"verify-running over 2 nodes: median {statistics.median(verifies):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
