"""A private engine of one profile for a test session or a benchmark: DOCKER_HOST points at it, stand-in bases copied."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

from kvbake.engines.adapters.client import Engine
from kvbake_rig.node_engine import NodeEngine
from kvbake_rig.recipes import recipe_named

DEFAULT_HOST = "unix:///var/run/docker.sock"


def copy_images(source: Engine, target: Engine, references: Sequence[str]) -> None:
    """save | load each image the target lacks: the config digest stays the same on every store."""
    for reference in references:
        if target.inspect_image(reference) is None and source.inspect_image(reference) is not None:
            target.client.image.load(source.client.image.save(reference))


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def profile_engine(name: str, images: Sequence[str] = ()) -> Iterator[Engine]:
    """Start an engine of profile `name`, point DOCKER_HOST at it while the block runs, give it `images` from the
    default engine; stop it and remove its folders afterwards."""
    root = Path(tempfile.mkdtemp(prefix="kvbake-profile-engine-"))
    saved = os.environ.get("DOCKER_HOST")
    previous_handler = signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so the engine is stopped on `kill` too
    try:
        with NodeEngine(root / "engine", name="build", recipe=recipe_named(name)) as started:
            os.environ["DOCKER_HOST"] = started.host
            target = Engine()
            copy_images(Engine(saved or DEFAULT_HOST), target, images)
            yield target
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        if saved is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = saved
        shutil.rmtree(root, ignore_errors=True)
