"""Benchmark the way from a running serve to a kvbake serve and back, in every serve shape operators run, on two node
engines, each serve started with the stand-in chain's files bind-mounted over its source root as the seed's overlay is:
the seconds of `init`, `lock --donor` (which proves the chain's result is the mounted bytes), `build`, `push`,
`config --check`, `adopt`, `deploy --preset control` and `rollback` (back to the adopted serve), then each shape's
proof line. Prints figures; asserts no timing.

    python scripts/bench_serve_shapes.py [--profile docker-26.1-containerd] [--shapes "main process;compose"]

The serves are the rig's stand-in (kvbake_rig/serve_shapes.py) started by hand on the host network as operators start
them; every step uses the manifest and deployment file init wrote, as written (readiness probe included), with the
reference launcher's stand-in twin (`init --launcher scripts/standin_reference_launcher.py`: the same plan, the stand-in
programs in place of vLLM and Ray). With --profile, the build engine and both nodes run that engine profile.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbake.cli import main as kvbake  # noqa: E402
from kvbake.engines.adapters.client import Engine  # noqa: E402
from kvbake_rig import LocalRegistry, NodeEngine  # noqa: E402
from kvbake_rig.profile_engine import profile_engine  # noqa: E402
from kvbake_rig.recipes import EngineRecipe, recipe_named  # noqa: E402
from kvbake_rig.ports import free_port  # noqa: E402
from kvbake_rig.serve_shapes import (BASE, RIG_SECRETS, SHAPES, ShapePorts, chain_overlay, donor_clone,  # noqa: E402
                                     within_this_machines_memlock)

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("init", "lock --donor", "build", "push", "config --check", "adopt", "deploy control", "rollback")
PROOF = "proof: "


def quiet(*argv: str) -> None:
    """Run a kvbake command, its report left out (only the figures are printed)."""
    timed_report(*argv)


def timed(*argv: str) -> float:
    return timed_report(*argv)[0]


def timed_report(*argv: str) -> tuple[float, str]:
    """A kvbake command's seconds and its report."""
    report = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(report):
        code = kvbake(list(argv))
    if code != 0:
        raise SystemExit(f"build.py {' '.join(argv[:2])} failed with {code}")
    return time.perf_counter() - start, report.getvalue()


def clear(nodes: dict[str, NodeEngine], repository: str) -> None:
    """Both nodes new to kvbake and serving nothing (every container goes: serves, kept serves, state, lock); the base
    stays."""
    for node in nodes.values():
        engine = Engine(node.host)
        for container in node.client().container.list(all=True):
            engine.remove_container(container.id)
        for kind in ("current", "previous", "staged"):
            engine.untag(f"{repository}:{kind}")


def reviewer_keys(folder: Path) -> tuple[Path, Path]:
    """A reviewer's key pair (cosign reaches the loopback registry only): init lists the public key, push signs with the
    private one, and every deploy checks the signature."""
    os.environ.setdefault("COSIGN_PASSWORD", "the reviewer's own")
    for name in ("HTTPS_PROXY", "HTTP_PROXY"):
        os.environ.setdefault(name, "http://127.0.0.1:9")
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    quiet("keys", "--out", str(folder), "--name", "reviewer")
    return folder / "reviewer.key", folder / "reviewer.pub"


def walk(shape: str, nodes: dict[str, NodeEngine], manifest: Path, folder: Path) -> tuple[dict[str, float], str]:
    """One shape, the overlay bind-mounted: start it on the host network, then time each step an operator runs, with
    the files init wrote and the donor checkout (the only file not written by kvbake); the lock's proof line."""
    start, _ = SHAPES[shape]
    project = folder / shape.replace(" ", "-").replace(",", "").strip("-")
    (project / "model").mkdir(parents=True)
    donor, revision = donor_clone(folder / f"{project.name}-donor")
    signing_key, public = reviewer_keys(folder / f"{project.name}-reviewer")
    ports = ShapePorts(free_port(), free_port(), free_port(), project / "model", chain_overlay())
    for key, node in nodes.items():
        start(node.client(), key, ports)
    time.sleep(2)  # an exec'd serve takes a moment to appear
    launcher = f"{sys.executable} {ROOT / 'scripts' / 'standin_reference_launcher.py'}"
    registry = str(yaml.safe_load(manifest.read_text())["output"]["repository"]).split("/", 1)[0]
    figures = {"init": timed("init", *(f"--node=spark-{key}={node.host}" for key, node in nodes.items()), "--template", str(manifest),
                             "--out", str(project), "--launcher", launcher, "--registry", registry, "--donor-revision", revision,
                             "--signing-key", str(public))}
    within_this_machines_memlock(project / "deploy.yaml")  # a privileged serve's memlock, as far as this machine allows
    figures["lock --donor"], report = timed_report("lock", "--manifest", str(project / "manifest.yaml"), "--donor", str(donor))
    proof = next((line for line in report.splitlines() if line.startswith(PROOF)), "no proof line")
    figures["build"] = timed("build", "--manifest", str(project / "manifest.yaml"))
    figures["push"] = timed("push", "--manifest", str(project / "manifest.yaml"), "--sign", str(signing_key))
    ship = ("--manifest", str(project / "manifest.yaml"), "--deploy", str(project / "deploy.yaml"))
    figures["config --check"] = timed("config", "--check", *ship)
    figures["adopt"] = timed("adopt", *ship)
    figures["deploy control"] = timed("deploy", "--preset", "control", "--reason", "bench", *ship)
    figures["rollback"] = timed("rollback", *ship)
    return figures, proof


def measure(engine: Engine, recipe: EngineRecipe | None, shapes: list[str]) -> int:
    print(f"engine: {engine.profile().describe()}")
    os.environ.update(RIG_SECRETS)  # where kvbake runs: the secrets the serve with a token was adopted with come from here
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard != resource.RLIM_INFINITY:
        print(f"memlock: no container here may lock more than {hard} bytes, so a --privileged serve's memlock -1 is lowered to that")
    with tempfile.TemporaryDirectory(prefix="kvbake-bench-shapes-") as tmp:
        folder = Path(tmp)
        with LocalRegistry(folder / "registry") as registry, NodeEngine(folder / "a", name="a", recipe=recipe) as node_a, \
                NodeEngine(folder / "b", name="b", recipe=recipe) as node_b:
            project = folder / "standin"
            shutil.copytree(ROOT / "examples" / "standin", project, ignore=shutil.ignore_patterns(".kvbake"))
            manifest = project / "manifest.yaml"
            repository = f"{registry.address}/kvbake/standin-kvpack"
            manifest.write_text(manifest.read_text().replace("127.0.0.1:5000/kvbake/standin-kvpack", repository))
            quiet("lock", "--manifest", str(manifest), "--rebase-base")
            quiet("build", "--manifest", str(manifest))
            quiet("push", "--manifest", str(manifest))
            engine.tag(BASE, f"{repository}:base")
            engine.client.image.push(f"{repository}:base", quiet=True)
            nodes = {"a": node_a, "b": node_b}
            for node in nodes.values():
                node.client().image.pull(f"{repository}:base", quiet=True)
                node.client().image.tag(f"{repository}:base", BASE)
            print(f"{'shape':<22} " + " ".join(f"{step:>15}" for step in STEPS))
            proofs = {}
            for shape in shapes:
                figures, proofs[shape] = walk(shape, nodes, manifest, folder)
                print(f"{shape:<22} " + " ".join(f"{figures[step]:>14.2f}s" for step in STEPS), flush=True)
                clear(nodes, repository)
            for shape, proof in proofs.items():
                print(f"{shape}: {proof}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", help="engine profile of the build engine and the nodes (default: the default engine's)")
    parser.add_argument("--shapes", default=";".join(SHAPES), help=f"shapes separated by ';' (default: all: {'; '.join(SHAPES)})")
    args = parser.parse_args()
    shapes = [s.strip() for s in args.shapes.split(";") if s.strip()]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape(s) {', '.join(unknown)}; choose from {', '.join(SHAPES)}")
    if args.profile:
        with profile_engine(args.profile, [BASE]) as engine:
            return measure(engine, recipe_named(args.profile), shapes)
    return measure(Engine(), None, shapes)


if __name__ == "__main__":
    sys.exit(main())
