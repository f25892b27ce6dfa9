"""Benchmark: kvbake bake+verify on the stand-in with ~0.5 GB and ~4 GB bases, against the naive docker build + docker
save hash check, in the same run. Prints the figures and the ratios; it is not a test and asserts no timing.

    python scripts/bench_bake.py [--repeats 3] [--profile docker-26.1-containerd]
    python scripts/bench_bake.py --compare docker-26.1-classic,docker-26.1-containerd [--repeats 11]

With --profile, the run uses a private engine of that profile (see scripts/engines.py), given the stand-in base.
With --compare, one private engine per profile runs at once and the bakes alternate between them, so both profiles
meet the same machine load; it prints each profile's median and the ratio of the second to the first, per base size.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbake.bake.adapters.builder import build_image, docker_build_context  # noqa: E402
from kvbake.engines.adapters.client import Engine  # noqa: E402
from kvbake.lock import read_lock  # noqa: E402
from kvbake.bake.adapters.pinning import create_lock  # noqa: E402
from kvbake.manifest import load_manifest  # noqa: E402
from kvbake.bake.core.plan import make_plan, read_overlay  # noqa: E402
from kvbake_rig.node_engine import NodeEngine  # noqa: E402
from kvbake_rig.profile_engine import DEFAULT_HOST, copy_images, profile_engine  # noqa: E402
from kvbake_rig.recipes import recipe_named  # noqa: E402
from kvbake.bake.adapters.verifier import verify_image  # noqa: E402

STANDIN = Path(__file__).resolve().parents[1] / "examples" / "standin"
STANDIN_BASE = "kvbake-standin/vllm-base:0.33.0"
SIZES_MB = {"0.5g": 512, "4g": 4096}


def filler_base(engine: Engine, label: str, total_mb: int) -> str:
    """The stand-in base plus incompressible filler layers (512 MB each at most) up to about total_mb."""
    tag = f"kvbake-bench/base:{label}"
    if engine.inspect_image(tag):
        return tag
    base_mb = int(engine.client.image.inspect(STANDIN_BASE).size / 2**20)
    remaining, lines = total_mb - base_mb, [f"FROM {STANDIN_BASE}"]
    index = 0
    while remaining > 0:
        chunk = min(512, remaining)
        lines.append(f'RUN ["dd", "if=/dev/urandom", "of=/filler-{index}", "bs=1M", "count={chunk}", "status=none"]')
        remaining, index = remaining - chunk, index + 1
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "Dockerfile").write_text("\n".join(lines) + "\n")
        engine.client.legacy_build(tmp, tags=[tag], network="none")
    return tag


def project_for(base: str, folder: Path) -> Path:
    shutil.copytree(STANDIN, folder, ignore=shutil.ignore_patterns(".kvbake", "manifest.lock.json"))
    manifest = folder / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace(STANDIN_BASE, base))
    return manifest


def kvbake_once(engine: Engine, manifest: Path) -> float:
    loaded = load_manifest(manifest)
    start = time.perf_counter()
    built = build_image(engine, loaded)
    plan = make_plan(loaded, read_lock(loaded), read_overlay(loaded, read_lock(loaded)))
    verify_image(engine, plan, built.reference, deep=True)
    return time.perf_counter() - start


def naive_once(engine: Engine, manifest: Path) -> float:
    """docker build of Dockerfile.overlay, then docker save and a hash of every chain file found in the layers."""
    loaded = load_manifest(manifest)
    lock = read_lock(loaded)
    plan = make_plan(loaded, lock, read_overlay(loaded, lock))
    wanted = {f"{lock.source_root.lstrip('/')}/{f.path}": f.overlay_sha256 for f in lock.files}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        dockerfile = docker_build_context(plan, Path(tmp), engine.require_image(loaded.base.image)["Id"])
        image = engine.legacy_build(Path(tmp), dockerfile, "kvbake-bench/naive:latest")
        archive = Path(tmp) / "saved.tar"
        engine.client.image.save(image, output=archive)
        found = hashes_in_save(archive, set(wanted))
    elapsed = time.perf_counter() - start
    assert found == wanted, "the naive check found other hashes"
    return elapsed


def hashes_in_save(archive: Path, wanted: set[str]) -> dict[str, str]:
    """Walk the saved layers bottom to top, so an upper layer's file wins, as in the running image."""
    found: dict[str, str] = {}
    with tarfile.open(archive) as outer:
        layers = json.loads(outer.extractfile("manifest.json").read())[0]["Layers"]
        for name in layers:
            with tarfile.open(fileobj=outer.extractfile(name), mode="r|*") as layer:
                for entry in layer:
                    if entry.isfile() and entry.name in wanted:
                        found[entry.name] = hashlib.sha256(layer.extractfile(entry).read()).hexdigest()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", help="engine profile to measure (default: the default engine)")
    parser.add_argument("--kvbake-only", action="store_true", help="skip the naive path (its figures do not change with kvbake's code)")
    parser.add_argument("--compare", metavar="A,B", help="two engine profiles measured alternately, kvbake path only")
    args = parser.parse_args()
    if args.compare:
        return compare(args.compare.split(","), args.repeats)
    if args.profile:
        with profile_engine(args.profile, [STANDIN_BASE]) as engine:
            return measure(engine, args.repeats, not args.kvbake_only)
    return measure(Engine(), args.repeats, not args.kvbake_only)


def measure(engine: Engine, repeats: int, naive_too: bool = True) -> int:
    print(f"engine: {engine.profile().describe()}")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="kvbake-bench-") as tmp:
        for label, total in SIZES_MB.items():
            base = filler_base(engine, label, total)
            size_gb = engine.client.image.inspect(base).size / 1e9
            manifest = project_for(base, Path(tmp) / label)
            create_lock(engine, load_manifest(manifest))
            kv = statistics.median(kvbake_once(engine, manifest) for _ in range(repeats))
            naive = statistics.median(naive_once(engine, manifest) for _ in range(repeats)) if naive_too else float("nan")
            results[label] = {"kvbake": kv, "naive": naive}
            print(f"base {label} ({size_gb:.2f} GB): kvbake bake+deep verify {kv:.2f} s, naive build+save check {naive:.2f} s (median of {repeats})")
    small, big = results["0.5g"], results["4g"]
    print(f"kvbake 4 GB / kvbake 0.5 GB = {big['kvbake'] / small['kvbake']:.2f}   (target <= 1.1)")
    if naive_too:
        print(f"naive 4 GB / kvbake 4 GB   = {big['naive'] / big['kvbake']:.1f}   (target >= 10)")
    engine.remove_image("kvbake-bench/naive:latest")
    return 0


def compare(profiles: list[str], repeats: int) -> int:
    """Alternate kvbake bake+deep verify between engines of two profiles running side by side."""
    if len(profiles) != 2:
        print("bench_bake: --compare takes two profiles, e.g. docker-26.1-classic,docker-26.1-containerd", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kvbake-bench-") as tmp, contextlib.ExitStack() as stack:
        engines = []
        for name in profiles:
            node = stack.enter_context(NodeEngine(Path(tmp) / name, name=name[:12], recipe=recipe_named(name)))
            engine = Engine(node.host)
            copy_images(Engine(DEFAULT_HOST), engine, [STANDIN_BASE])
            engines.append(engine)
        for label, total in SIZES_MB.items():
            manifests = []
            for name, engine in zip(profiles, engines):
                manifest = project_for(filler_base(engine, label, total), Path(tmp) / f"{name}-{label}")
                create_lock(engine, load_manifest(manifest))
                manifests.append(manifest)
            times: list[list[float]] = [[], []]
            for _ in range(repeats):
                for index in (0, 1):
                    times[index].append(kvbake_once(engines[index], manifests[index]))
            first, second = (statistics.median(t) for t in times)
            print(f"base {label}: {profiles[0]} {first:.2f} s, {profiles[1]} {second:.2f} s (medians of {repeats}, alternated); "
                  f"{profiles[1]} / {profiles[0]} = {second / first:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
