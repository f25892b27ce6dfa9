"""Benchmark rebase on the stand-in: the seconds of `rebase --to` (vLLM 0.33.0 → 0.34.0, the report and the candidate
chain) and of `lock` on the stand-in base, each the median of a few runs on a fresh copy of the example. Prints
figures; asserts no timing.

    python scripts/bench_rebase.py [--runs 3]

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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    locks, rebases = [], []
    with tempfile.TemporaryDirectory(prefix="kvbake-bench-rebase-") as scratch:
        for run in range(args.runs):
            project = Path(scratch) / f"standin-{run}"
            shutil.copytree(ROOT / "examples" / "standin", project, ignore=shutil.ignore_patterns(".kvbake"))
            manifest = str(project / "manifest.yaml")
            locks.append(timed("lock", "--manifest", manifest, "--rebase-base"))
            rebases.append(timed("rebase", "--to", TARGET, "--manifest", manifest, "--out", str(project / "candidate")))
    print(f"lock of the stand-in (vLLM 0.33.0 base): {statistics.median(locks):.2f} s (median of {args.runs})")
    print(f"rebase --to {TARGET} (report and candidate chain): {statistics.median(rebases):.2f} s (median of {args.runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
