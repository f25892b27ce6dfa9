"""Benchmark rebase and lock on the stand-in: the seconds of `rebase --to` (vLLM 0.33.0 → 0.34.0, the report and the
candidate chain) and of `lock`, each the median of a few runs on a fresh copy of the example; with --sizes, `lock` on
bases grown to each size (the stand-in base plus one layer of random bytes), once from one `docker save` and then from
a registry copy of the base (a local registry the script starts), and the ratio of the largest to the smallest size.
Prints figures; asserts no timing.

    python scripts/bench_rebase.py [--runs 3] [--sizes 0.5,4.3]

Needs both stand-in bases on the local engine: python scripts/standin_base.py [--vllm-version 0.34.0].
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbake.cli import main as kvbake  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGET = "kvbake-standin/vllm-base:0.34.0"
SOURCE_BASE = "kvbake-standin/vllm-base:0.33.0"
GROWN = "kvbake-bench/vllm-base"


def timed(*argv: str) -> float:
    """Seconds one kvbake command takes; it must succeed."""
    quiet = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        code = kvbake(list(argv))
    seconds = time.monotonic() - started
    if code != 0:
        raise SystemExit(f"bench_rebase: {' '.join(argv[:2])} exited {code}: {quiet.getvalue().strip()[-300:]}")
    return seconds


def standin_copy(folder: Path, base: str | None = None) -> str:
    """A fresh copy of the stand-in example (its base swapped for `base`); the manifest's path."""
    shutil.copytree(ROOT / "examples" / "standin", folder, ignore=shutil.ignore_patterns(".kvbake"))
    manifest = folder / "manifest.yaml"
    if base is not None:
        manifest.write_text(manifest.read_text().replace(f"image: {SOURCE_BASE}", f"image: {base}", 1))
    return str(manifest)


def grown_base(engine, gigabytes: float, scratch: Path) -> str:
    """The stand-in base plus one layer of `gigabytes` GB of random bytes (outside the source root), built locally."""
    tag = f"{GROWN}:{gigabytes}g"
    context = scratch / f"context-{gigabytes}"
    context.mkdir()
    megabytes = int(gigabytes * 1000)
    (context / "Dockerfile").write_text(f"FROM {SOURCE_BASE}\nRUN head -c {megabytes}M /dev/urandom > /opt/payload.bin\n")
    engine.client.legacy_build(context, tags=[tag], network="none")
    return tag


def lock_by_size(sizes: list[float], runs: int, scratch: Path) -> dict[float, tuple[float, float]]:
    """Per size: (seconds of lock from one docker save, median seconds of lock from a registry copy)."""
    from kvbake.engines.adapters.client import Engine
    from kvbake_rig import LocalRegistry

    engine = Engine()
    figures = {}
    with LocalRegistry(scratch / "registry") as registry:
        for size in sizes:
            base = grown_base(engine, size, scratch)
            copy = f"{registry.address}/{base}"
            try:
                manifest = standin_copy(scratch / f"save-{size}", base)
                from_save = timed("lock", "--manifest", manifest)
                engine.client.image.tag(base, copy)
                engine.client.image.push(copy, quiet=True)
                from_registry = []
                for run in range(runs):
                    from_registry.append(timed("lock", "--manifest", standin_copy(scratch / f"registry-{size}-{run}", base)))
                figures[size] = (from_save, statistics.median(from_registry))
            finally:
                engine.client.image.remove([copy, base], force=True, prune=True)
    return figures


def print_sizes(figures: dict[float, tuple[float, float]], runs: int) -> None:
    for size, (from_save, from_registry) in figures.items():
        print(f"lock on a {size} GB base: {from_save:.2f} s from one docker save, {from_registry:.2f} s from a registry copy "
              f"(median of {runs})")
    small, large = min(figures), max(figures)
    if small != large:
        print(f"lock at {large} GB ÷ lock at {small} GB: {figures[large][1] / figures[small][1]:.2f} from a registry copy, "
              f"{figures[large][0] / figures[small][0]:.2f} from docker save")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="", help="comma-separated base sizes in GB, e.g. 0.5,4.3 (each base is built here)")
    args = parser.parse_args(argv)
    sizes = [float(item) for item in args.sizes.split(",") if item]
    locks, rebases = [], []
    with tempfile.TemporaryDirectory(prefix="kvbake-bench-rebase-") as scratch:
        for run in range(args.runs):
            project = Path(scratch) / f"standin-{run}"
            manifest = standin_copy(project)
            locks.append(timed("lock", "--manifest", manifest, "--rebase-base"))
            rebases.append(timed("rebase", "--to", TARGET, "--manifest", manifest, "--out", str(project / "candidate")))
    print(f"lock of the stand-in (vLLM 0.33.0 base): {statistics.median(locks):.2f} s (median of {args.runs})")
    print(f"rebase --to {TARGET} (report and candidate chain): {statistics.median(rebases):.2f} s (median of {args.runs})")
    if sizes:
        with tempfile.TemporaryDirectory(prefix="kvbake-bench-lock-") as scratch:
            print_sizes(lock_by_size(sizes, args.runs, Path(scratch)), args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
