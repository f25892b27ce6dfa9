"""The real-serve stand-in here: its base, tiny model and corpus, a locked project copy, a one-node deployment."""

# The deployment serves it with the reference vLLM launcher on one node engine of the rig.

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kvbake.engines.adapters.client import Engine
from kvbake.errors import BaseImageError, KvbakeError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "realserve"
BASE = "kvbake-standin/vllm-cpu-base:0.32.0"
SOURCE_ROOT = "/usr/local/lib/python3.11/dist-packages"
SERVED_NAME = "tiny-llama"
CONTAINER = "kvbake-realserve"


@dataclass(frozen=True)
class TinyModel:
    """The generated model folder and the corpus in its vocabulary."""

    folder: Path
    corpus: Path

    @property
    def config(self) -> Path:
        return self.folder / "config.json"


def require_base(engine: Engine) -> None:
    """The serving base must be built locally first (never pulled)."""
    if engine.inspect_image(BASE) is None:
        raise BaseImageError(f"{BASE} is not on this engine", "build it with python scripts/standin_vllm_base.py (cached afterwards)")


def tiny_model(corpus: Path, docker_host: str | None = None) -> TinyModel:
    """The cached tiny model (generated in the base, on the engine `docker_host` or DOCKER_HOST's, when missing) and its
    corpus, written to `corpus`."""
    env = {**os.environ, **({"DOCKER_HOST": docker_host} if docker_host else {})}
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "tiny_model.py"), "--corpus", str(corpus)],
                            capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        raise KvbakeError(f"scripts/tiny_model.py failed: {(result.stderr.strip().splitlines() or ['no output'])[-1]}",
                          "run python scripts/tiny_model.py by hand and read its error")
    return TinyModel(Path(result.stdout.strip().splitlines()[-1]), corpus)


def project_copy(folder: Path) -> Path:
    """examples/realserve copied into `folder`; its manifest path."""
    target = folder / "realserve"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns(".kvbake", "configs"))
    return target / "manifest.yaml"


def lock_matches_local_base(manifest_path: Path, engine: Engine) -> bool:
    """True when the committed lock pins the base this engine holds (else `lock --rebase-base` re-pins it)."""
    manifest = load_manifest(manifest_path)
    found = engine.identify(BASE)
    return manifest.lock_path.exists() and found is not None and read_lock(manifest).base.config_digest == found["ConfigDigest"]


def launch_vllm_command() -> str:
    """The reference launcher's console script, installed beside this Python (kvbake's environment)."""
    return str(Path(sys.executable).parent / "kvbake-launch-vllm")


def deployment(folder: Path, model: TinyModel, port: int, node_host: str, *, name: str = "deploy.yaml",
               model_dir: str | None = None, readiness_port: int | None = None, readiness_timeout_s: float = 300.0,
               signing: dict | None = None) -> Path:
    """A one-node deployment: the node's engine serves the model with kvbake-launch-vllm on the host network; with
    `signing`, the deployment file's signing section."""
    env = {"MODEL_DIR": model_dir or str(model.folder), "SERVED_MODEL_NAME": SERVED_NAME, "VLLM_HOST": "127.0.0.1",
           "VLLM_PORT": str(port), "MASTER_PORT": str(port + 1), "GPUS": "none", "SHM_SIZE": "1g",
           "SOURCE_ROOT": SOURCE_ROOT, "CONTAINER_ENV": json.dumps({"HF_HUB_OFFLINE": "1"})}
    document = {
        "format": 1,
        "nodes": [{"name": "node-a", "host": node_host, "role": "head", "address": "127.0.0.1"}],
        "launcher": {"command": [launch_vllm_command()], "container": CONTAINER,
                     "timeout_s": 120, "env": env},
        "readiness": {"url": f"http://127.0.0.1:{readiness_port or port}/health", "status": 200,
                      "timeout_s": readiness_timeout_s, "interval_s": 1},
        "lock_stale_after_s": 900,
        **({"signing": signing} if signing else {}),
    }
    path = folder / name
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path


def registry_root() -> Path:
    """Where the real-serve rig keeps its registry's blobs between runs: the 3.8 GB base is uploaded once per machine."""
    from kvbake.engines.adapters.manifestcache import cache_root

    return cache_root() / "realserve-registry"


def validate_args(model: TinyModel, port: int) -> list[str]:
    """validate's options for the stand-in presets (max-model-len 4,096), with a pressure step that must preempt.

    `--pressure auto` reads the pool the serve planned from its /metrics (256 blocks of 128 tokens for `control`, 512
    for `packing-x2`) and sends as many requests, with prompts that long and answers that long, that the requests vLLM
    admits together outgrow the pool before the first of them can finish (docs/operate.md)."""
    return ["--endpoint", f"http://127.0.0.1:{port}", "--corpus", str(model.corpus), "--prefix-tokens", "2000",
            "--corruption-tokens", "1500", "--depths", "1000,2500", "--pressure", "auto", "--mem-floor", "1"]


def untag_release(engine: Engine, repository: str) -> None:
    """Remove the tags and digest references of the release repository that a push left on the build engine."""
    for image in engine.client.image.list(repository_or_tag=repository):
        for reference in [*image.repo_tags, *image.repo_digests]:
            if reference.startswith((repository + ":", repository + "@")):
                engine.untag(reference)
