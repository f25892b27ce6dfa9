"""The pushed image a deploy rolls out: its digest reference from the push record, what it holds from the lock."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kvbake.bake.core.plan import tag_for
from kvbake.bake.core.provenance import labels as provenance_labels
from kvbake.errors import RegistryError, UsageError
from kvbake.lock import Lock
from kvbake.manifest import Manifest
from kvbake.ship.core.release import PushedImage, runtime_config

PUSHES_DIR = ".kvbake/pushes"
DIGEST_REFERENCE = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


def pushed_reference(root: Path, reference: str, tag: str) -> str:
    """The `repo@sha256:…` reference that `push` recorded for `tag`."""
    path = root / PUSHES_DIR / f"{tag}.json"
    if not path.exists():
        raise RegistryError(f"{reference} has not been pushed (no push record)", "run python build.py push first")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RegistryError(f"the push record of {tag} ({path.name}) is unreadable or not JSON ({err})",
                            "run python build.py push again to rewrite it") from None
    pinned = record.get("pinned") if isinstance(record, dict) else None
    if not isinstance(pinned, str) or not DIGEST_REFERENCE.match(pinned):
        raise RegistryError(f"the push record of {tag} has no digest reference", "run python build.py push again")
    return pinned


def check_digest_reference(image: str) -> str:
    """`deploy --image` must name one immutable image, `repo@sha256:<64 hex>`: a tag can be moved to other content."""
    if not DIGEST_REFERENCE.match(image):
        raise UsageError(f"--image {image!r} is not a digest reference (REPOSITORY@sha256:<64 hex digits>); a tag can name other content "
                         "tomorrow", "pass the digest push printed (its pull: line), or leave --image out to use the push record")
    return image


def pushed_image(manifest: Manifest, lock: Lock, image: str | None = None) -> PushedImage:
    """The release's image: pulled by the reference the push record of the lock's tag holds (or `image`, deploy
    --image), holding what the lock pins (config digest, base layers and thin layer), every label (the base's, then
    those the manifest's pinned sections and the lock give it) and the base's Env, Entrypoint, Cmd and WorkingDir,
    which the bake keeps. Nothing is rebuilt: neither overlay/ nor the thin layer is read."""
    tag = tag_for(manifest, lock)
    pinned = check_digest_reference(image) if image else pushed_reference(manifest.root, f"{manifest.output.repository}:{tag}", tag)
    base_runtime = lock.base.config.get("config") or {}
    labels = {**(base_runtime.get("Labels") or {}), **provenance_labels(manifest, lock, tag)}
    return PushedImage(pinned, lock.derived.image_id, (*lock.base.diff_ids, lock.derived.layer_diff_id), labels,
                       runtime_config(base_runtime))
