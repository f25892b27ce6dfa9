"""Benchmark rebase and lock on the stand-in: the seconds of `rebase --to` (vLLM 0.33.0 → 0.34.0, the report and the
candidate chain) and of `lock`, each the median of a few runs on a fresh copy of the example; with --sizes, `lock` on
bases grown to each size (the stand-in base plus one layer of random bytes, built on the engine, so no registry holds
it), first with no registry copy (lock reads the config from the engine's own store, or from one `docker save` where
the store cannot be read: the route is printed), then from a registry copy of the base (a local registry the script
starts), and the ratio of the largest to the smallest size for each. With --profile, the sizes run on an engine of
that profile (started here, the stand-in base copied in). Prints figures; asserts no timing.

    python scripts/bench_rebase.py [--runs 3] [--sizes 0.5,4.3] [--profile docker-26.1-containerd]

Needs both stand-in bases on the local engine: python scripts/standin_base.py [--vllm-version 0.34.0].
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
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


class LockSource(logging.Handler):
    """Where lock said it read the base's config (its INFO line)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.sources: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("lock read the config of "):
            self.sources.append(message.partition(" from ")[2])


def timed_lock(manifest: str) -> tuple[float, str]:
    """Seconds of one lock, and the route it read the base's config by."""
    logger = logging.getLogger("kvbake.bake.adapters.pinning")
    source, level = LockSource(), logger.level
    logger.addHandler(source)
    logger.setLevel(logging.INFO)
    try:
        seconds = timed("lock", "--manifest", manifest)
    finally:
        logger.removeHandler(source)
        logger.setLevel(level)
    return seconds, (source.sources or ["?"])[-1]


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


def lock_by_size(sizes: list[float], runs: int, scratch: Path) -> dict[float, tuple[float, str, float]]:
    """Per size: (median seconds of lock with no registry copy, the route it took, median seconds from a registry copy)."""
    from kvbake.engines.adapters.client import Engine
    from kvbake_rig import LocalRegistry

    engine = Engine()
    figures = {}
    with LocalRegistry(scratch / "registry") as registry:
        for size in sizes:
            base = grown_base(engine, size, scratch)
            copy = f"{registry.address}/{base}"
            try:
                alone = [timed_lock(standin_copy(scratch / f"alone-{size}-{run}", base)) for run in range(runs)]
                engine.client.image.tag(base, copy)
                engine.client.image.push(copy, quiet=True)
                from_registry = [timed_lock(standin_copy(scratch / f"registry-{size}-{run}", base))[0] for run in range(runs)]
                routes = sorted({route for _, route in alone})
                figures[size] = (statistics.median(seconds for seconds, _ in alone), " and ".join(routes), statistics.median(from_registry))
            finally:
                engine.client.image.remove([copy, base], force=True, prune=True)
    return figures


def print_sizes(figures: dict[float, tuple[float, str, float]], runs: int, engine_name: str) -> None:
    print(f"engine: {engine_name}")
    for size, (alone, route, from_registry) in figures.items():
        print(f"lock on a {size} GB base: {alone:.2f} s with no registry copy (from {route}), {from_registry:.2f} s from a "
              f"registry copy (medians of {runs})")
    small, large = min(figures), max(figures)
    if small != large:
        print(f"lock at {large} GB ÷ lock at {small} GB: {figures[large][0] / figures[small][0]:.2f} with no registry copy, "
              f"{figures[large][2] / figures[small][2]:.2f} from a registry copy")


def sizes_on(profile: str | None, sizes: list[float], runs: int) -> None:
    """The sizes' figures on the default engine, or on an engine of `profile` started for them."""
    from kvbake.engines.adapters.client import Engine

    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="kvbake-bench-lock-") as scratch:
        if profile:
            from kvbake_rig.profile_engine import profile_engine

            stack.enter_context(profile_engine(profile, [SOURCE_BASE]))
        print_sizes(lock_by_size(sizes, runs, Path(scratch)), runs, Engine().profile().name)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="", help="comma-separated base sizes in GB, e.g. 0.5,4.3 (each base is built here)")
    parser.add_argument("--profile", help="the engine profile the sizes run on (default: the default engine)")
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
        sizes_on(args.profile, sizes, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
