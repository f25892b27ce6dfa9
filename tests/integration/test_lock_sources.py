"""lock reads the base where it already lives: a registry copy's config and the engine's directories, or, for a base
no registry holds (built on its node), the config from the engine's own store through a container that never runs;
never a `docker save` of the whole base, and the same lock either way."""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from python_on_whales.exceptions import NoSuchImage

from kvbake.cli import main
from kvbake.engines.adapters.client import Engine
from kvbake_rig import LocalRegistry

from tiny import TINY_BASE

pytestmark = pytest.mark.docker  # every profile: the registry route, the engine's store and its archive heads on both stores
SOURCE_LOGGER = "kvbake.bake.adapters.base_source"


def saves_since(engine: Engine, since: datetime) -> list[str]:
    """The images the engine saved (its own `save` events) since `since`."""
    until = datetime.now(timezone.utc) + timedelta(seconds=1)
    events = engine.client.system.events(since=since, until=until, filters={"type": "image"})
    return [event.actor.id for event in events if event.action == "save"]


def forget_registry_copies(engine: Engine, image: str) -> None:
    """Other tests may have pushed the shared tiny base to a registry: drop those tags and digest references, so that
    the first lock here has no registry copy to read (the image itself stays)."""
    from kvbake.bake.core.registry_copies import names_registry_host, repository_of

    found = engine.client.image.inspect(image)
    for reference in [*found.repo_tags, *found.repo_digests]:
        if names_registry_host(repository_of(reference)):
            with contextlib.suppress(NoSuchImage):  # removing a tag can take its digest reference with it
                engine.client.image.remove(reference, force=False, prune=False)
    left = engine.client.image.inspect(image).repo_digests
    assert not [d for d in left if names_registry_host(repository_of(d))], left


def locked(manifest: Path, caplog: pytest.LogCaptureFixture) -> tuple[bytes, list[str], str]:
    """Lock again; the lock's bytes, the warnings the base reader logged, and where lock said it read the config."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kvbake"):
        assert main(["lock", "--manifest", str(manifest)]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.name == SOURCE_LOGGER and r.levelno >= logging.WARNING]
    (source,) = [r.getMessage().partition(" from ")[2] for r in caplog.records if r.getMessage().startswith("lock read the config of ")]
    return (manifest.parent / "manifest.lock.json").read_bytes(), warnings, source


def test_a_base_without_a_registry_copy_is_read_from_the_engine_s_store_and_a_copy_yields_the_same_lock(
        engine: Engine, tiny: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    forget_registry_copies(engine, TINY_BASE)
    started = datetime.now(timezone.utc)
    from_store, warnings, source = locked(tiny, caplog)
    assert (source, warnings) == ("the engine's own store", []), warnings
    assert saves_since(engine, started) == [], "a base no registry holds is read from the store, never saved whole"

    with LocalRegistry(tmp_path / "registry") as registry:
        copy = f"{registry.address}/kvbake-test/tiny:1"
        engine.client.image.tag(TINY_BASE, copy)
        try:
            engine.client.image.push(copy, quiet=True)
            started = datetime.now(timezone.utc)
            from_registry, warnings, source = locked(tiny, caplog)
            assert (warnings, saves_since(engine, started)) == ([], [])
            assert source.startswith(f"registry {registry.address}/kvbake-test/tiny"), source
            assert from_registry == from_store

            # the copy's registry stops: lock reads the engine's store again, and writes the same lock again
            registry.stop()
            started = datetime.now(timezone.utc)
            after_outage, warnings, source = locked(tiny, caplog)
            assert (source, warnings, saves_since(engine, started)) == ("the engine's own store", [], [])
            assert after_outage == from_store
        finally:
            engine.client.image.remove(copy, force=False, prune=False)
