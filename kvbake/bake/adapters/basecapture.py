"""Adapter: read the base's raw config, layer sizes and parent directories once (at lock time) from a streamed `docker save`."""

from __future__ import annotations

from kvbake.engines.adapters.client import Engine
from kvbake.engines.core.savefile import SavedImage, read_save
from kvbake.errors import BaseImageError
from kvbake.terminal import progress


def capture_base(engine: Engine, reference: str, diff_ids: tuple[str, ...], wanted_dirs: frozenset[str]) -> SavedImage:
    """Stream `docker save` once, in whatever format this engine writes; the config must describe the inspected layers.
    On the containerd store the save also yields the store's manifest, which goes into the manifest cache."""
    with progress.step(f"save {reference} (read once, for the lock)") as update:
        saved = read_save(progress.counted(engine.save_stream(reference), update), reference, wanted_dirs)
    if saved.diff_ids != diff_ids:
        raise BaseImageError(f"the saved config of {reference} names other layers than the engine reports ({engine.profile().name})",
                             "the image changed during the save; run the command again")
    if saved.store_manifest is not None:
        engine.remember_manifest(saved.store_manifest)
    return saved
