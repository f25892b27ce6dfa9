"""The lock: canonical JSON that pins the base, every patch, every file and the derived image."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kvbake import FORMAT_VERSION
from kvbake.digests import canonical_json, sha256_hex
from kvbake.errors import LockError
from kvbake.manifest import Manifest


@dataclass(frozen=True)
class LockedBase:
    """The base image as it was when locked."""

    reference: str
    platform: str
    config_digest: str
    diff_ids: tuple[str, ...]
    layer_sizes: tuple[int, ...]
    repo_digest: str | None
    config: dict = field(hash=False)


@dataclass(frozen=True)
class PatchFileHashes:
    """A file one patch touches, with its hash just before and just after that patch."""

    path: str
    change: str
    before: str | None
    after: str


@dataclass(frozen=True)
class LockedPatch:
    """One chain patch: its bytes, its git patch-id and what it does to each file."""

    id: str
    file: str
    sha256: str
    patch_id: str
    files: tuple[PatchFileHashes, ...]


@dataclass(frozen=True)
class LockedFile:
    """One file of the thin layer: base and overlay hashes, metadata, and the stale bytecode it shadows."""

    path: str
    base_sha256: str | None
    overlay_sha256: str
    mode: int
    uid: int
    gid: int
    stale_bytecode: tuple[str, ...]


@dataclass(frozen=True)
class LockedDir:
    """An existing base directory the layer must re-state with exactly the base's metadata (path from the image root)."""

    path: str
    mode: int
    uid: int
    gid: int
    mtime: int


@dataclass(frozen=True)
class Derived:
    """What the build must produce: the thin layer and the image ID."""

    layer_diff_id: str
    image_id: str


@dataclass(frozen=True)
class Lock:
    """Everything a build needs besides the manifest and the patch bytes."""

    format: int
    manifest_sha256: str
    source_root: str
    source_date_epoch: int
    donor_url: str
    donor_revision: str
    base: LockedBase
    patches: tuple[LockedPatch, ...]
    files: tuple[LockedFile, ...]
    dirs: tuple[LockedDir, ...]
    new_dirs: tuple[str, ...]
    overlay_tree_sha256: str
    derived: Derived

    def core_sha256(self) -> str:
        """The lock's identity without the derived section (which itself depends on this hash)."""
        document = lock_to_dict(self)
        document.pop("derived")
        return sha256_hex(canonical_json(document))

    def file(self, path: str) -> LockedFile:
        return next(f for f in self.files if f.path == path)

    def with_derived(self, derived: Derived) -> "Lock":
        return replace(self, derived=derived)


def lock_to_dict(lock: Lock) -> dict[str, Any]:
    return asdict(lock)


def lock_bytes(lock: Lock) -> bytes:
    """The lock file's bytes: canonical JSON, indented for review, newline-terminated."""
    return (json.dumps(lock_to_dict(lock), sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def write_lock(path: Path, lock: Lock) -> None:
    """Write atomically: a sibling temp file, then a rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(lock_bytes(lock))
    tmp.replace(path)


def read_lock(manifest: Manifest) -> Lock:
    """Read the manifest's lock, refusing a missing, malformed, foreign-format or drifted one."""
    path = manifest.lock_path
    if not path.exists():
        raise LockError(f"{manifest.path.name} is not locked ({path.name} is missing)",
                        f"run: python build.py lock --manifest {manifest.path.name} (with --donor DIR to import the patches)")
    try:
        lock = lock_from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError) as err:
        raise LockError(f"{path.name} is malformed ({type(err).__name__}: {err})", "regenerate it with python build.py lock") from None
    check_lock_matches(manifest, lock)
    return lock


def check_lock_matches(manifest: Manifest, lock: Lock) -> None:
    if lock.format != FORMAT_VERSION:
        raise LockError(f"{manifest.lock_path.name} has format {lock.format}, this kvbake writes {FORMAT_VERSION}", "run python build.py lock")
    if lock.manifest_sha256 != manifest.sha256:
        raise LockError(f"{manifest.lock_path.name} drifts from {manifest.path.name} (the manifest changed since it was locked)",
                        "review the change, then run python build.py lock")


def lock_from_dict(d: dict[str, Any]) -> Lock:
    base = d["base"]
    return Lock(
        format=int(d["format"]), manifest_sha256=str(d["manifest_sha256"]), source_root=str(d["source_root"]),
        source_date_epoch=int(d["source_date_epoch"]), donor_url=str(d["donor_url"]), donor_revision=str(d["donor_revision"]),
        base=LockedBase(
            reference=base["reference"], platform=base["platform"], config_digest=base["config_digest"],
            diff_ids=tuple(base["diff_ids"]), layer_sizes=tuple(int(s) for s in base["layer_sizes"]),
            repo_digest=base["repo_digest"], config=dict(base["config"]),
        ),
        patches=tuple(
            LockedPatch(p["id"], p["file"], p["sha256"], p["patch_id"], tuple(PatchFileHashes(**f) for f in p["files"]))
            for p in d["patches"]
        ),
        files=tuple(
            LockedFile(f["path"], f["base_sha256"], f["overlay_sha256"], int(f["mode"]), int(f["uid"]), int(f["gid"]), tuple(f["stale_bytecode"]))
            for f in d["files"]
        ),
        dirs=tuple(LockedDir(x["path"], int(x["mode"]), int(x["uid"]), int(x["gid"]), int(x["mtime"])) for x in d["dirs"]),
        new_dirs=tuple(d["new_dirs"]),
        overlay_tree_sha256=str(d["overlay_tree_sha256"]),
        derived=Derived(**d["derived"]),
    )
