"""The lock: canonical JSON that pins the base, every patch, every file and the derived image."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from kvbake import FORMAT_VERSION, READABLE_FORMATS
from kvbake.atomicfile import write_atomic
from kvbake.digests import canonical_json, sha256_hex
from kvbake.errors import LockError
from kvbake.json_fields import Fields, kind_of, read_document, shown
from kvbake.manifest import Manifest

MODIFY = "modify"  # a patch changes a file of the base
CREATE = "create"  # a patch creates a file the base does not have


@dataclass(frozen=True)
class LockedBase:
    """The base image as it was when locked."""

    reference: str
    platform: str
    config_digest: str
    diff_ids: tuple[str, ...]
    repo_digest: str | None
    config: dict = field(hash=False)
    # written by formats 1 and 2 only (from a `docker save`); kept when such a lock is read, so that its hash holds
    layer_sizes: tuple[int, ...] | None = None


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
    document = asdict(lock)
    if document["base"]["layer_sizes"] is None:
        del document["base"]["layer_sizes"]
    return document


def lock_bytes(lock: Lock) -> bytes:
    """The lock file's bytes: canonical JSON, indented for review, newline-terminated."""
    return (json.dumps(lock_to_dict(lock), sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def write_lock(path: Path, lock: Lock, before_rename: Callable[[], None] | None = None) -> None:
    """Write atomically: a unique temporary file in the same folder, fsync, rename, fsync the folder."""
    write_atomic(path, lock_bytes(lock), before_rename)


def read_lock(manifest: Manifest) -> Lock:
    """Read the manifest's lock, refusing a missing, malformed, foreign-format or drifted one."""
    path = manifest.lock_path
    if not path.exists():
        raise LockError(f"{manifest.path.name} is not locked ({path.name} is missing)",
                        f"run: python build.py lock --manifest {manifest.path.name} (with --donor DIR to import the patches)")
    lock = load_lock_file(path)
    check_lock_matches(manifest, lock)
    return lock


def load_lock_file(path: Path) -> Lock:
    """The lock in `path`; an unreadable, empty, non-UTF-8, non-JSON or ill-typed file is a LockError naming it."""
    return lock_from_dict(read_document(path), path.name)


def locked_source_date_epoch(path: Path) -> int:
    """The previous lock's SOURCE_DATE_EPOCH, read leniently (lock replaces the rest of it) but never guessed."""
    document = read_document(path)
    epoch = document.get("source_date_epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise LockError(f"{path.name} is malformed: source_date_epoch must be a whole number ≥ 0, not {kind_of(epoch)}, "
                        "so lock cannot keep the image's timestamps",
                        f"restore it from version control, or set SOURCE_DATE_EPOCH, or delete {path.name} to start a new epoch")
    return epoch


def pinned_manifest_sha256(manifest: Manifest, lock_format: int) -> str:
    """The manifest hash a lock of this format pins: the file's bytes (format 1) or its image sections (formats 2, 3)."""
    return manifest.sha256 if lock_format == 1 else manifest.image_sha256


def check_lock_matches(manifest: Manifest, lock: Lock) -> None:
    if lock.format not in READABLE_FORMATS:
        raise LockError(f"{manifest.lock_path.name} has format {lock.format}, this kvbake writes {FORMAT_VERSION}", "run python build.py lock")
    if lock.manifest_sha256 != pinned_manifest_sha256(manifest, lock.format):
        what = "the manifest changed" if lock.format == 1 else "its base, donor, chain, switches, forbidden names or output changed"
        raise LockError(f"{manifest.lock_path.name} drifts from {manifest.path.name} ({what} since it was locked)",
                        "review the change, then run python build.py lock")


TOP_KEYS = ("format", "manifest_sha256", "source_root", "source_date_epoch", "donor_url", "donor_revision", "base", "patches",
            "files", "dirs", "new_dirs", "overlay_tree_sha256", "derived")
BASE_KEYS = ("reference", "platform", "config_digest", "diff_ids", "repo_digest", "config")
SAVED_SIZES = "layer_sizes"  # a base key of formats 1 and 2
PATCH_KEYS = ("id", "file", "sha256", "patch_id", "files")
CHANGE_KEYS = ("path", "change", "before", "after")
FILE_KEYS = ("path", "base_sha256", "overlay_sha256", "mode", "uid", "gid", "stale_bytecode")
DIR_KEYS = ("path", "mode", "uid", "gid", "mtime")
DERIVED_KEYS = ("layer_diff_id", "image_id")
MAX_MODE = 0o7777


def lock_from_dict(document: Any, source: str = "the lock") -> Lock:
    """The Lock a JSON document describes; a foreign format, a missing or unknown key or a wrong type is a LockError
    naming `source` and the field."""
    if isinstance(document, dict) and type(document.get("format")) is int and document["format"] not in READABLE_FORMATS:
        raise LockError(f"{source} has format {document['format']}, this kvbake writes {FORMAT_VERSION}", "run python build.py lock")
    top = Fields(source, document, "", TOP_KEYS)
    lock_format = top.number("format")
    return Lock(
        format=lock_format, manifest_sha256=top.text("manifest_sha256"), source_root=top.text("source_root"),
        source_date_epoch=top.number("source_date_epoch"), donor_url=top.text("donor_url"), donor_revision=top.text("donor_revision"),
        base=_base(top.child("base", BASE_KEYS if lock_format >= 3 else (*BASE_KEYS, SAVED_SIZES))),
        patches=tuple(_patch(Fields(source, item, where, PATCH_KEYS)) for where, item in top.items("patches")),
        files=tuple(_file(Fields(source, item, where, FILE_KEYS)) for where, item in top.items("files")),
        dirs=tuple(_dir(Fields(source, item, where, DIR_KEYS)) for where, item in top.items("dirs")),
        new_dirs=top.texts("new_dirs", relative=True),
        overlay_tree_sha256=top.text("overlay_tree_sha256"),
        derived=_derived(top.child("derived", DERIVED_KEYS)),
    )


def _derived(derived: Fields) -> Derived:
    return Derived(layer_diff_id=derived.text("layer_diff_id"), image_id=derived.text("image_id"))


def _base(base: Fields) -> LockedBase:
    return LockedBase(
        reference=base.text("reference"), platform=base.text("platform"), config_digest=base.text("config_digest"),
        diff_ids=base.texts("diff_ids"), repo_digest=base.text("repo_digest", optional=True), config=base.plain_object("config"),
        layer_sizes=tuple(base.check_number(item, where) for where, item in base.items(SAVED_SIZES)) if SAVED_SIZES in base.value else None,
    )


def _patch(patch: Fields) -> LockedPatch:
    changes = tuple(_change(Fields(patch.source, item, where, CHANGE_KEYS)) for where, item in patch.items("files"))
    return LockedPatch(patch.text("id"), patch.relative("file"), patch.text("sha256"), patch.text("patch_id"), changes)


def _change(change: Fields) -> PatchFileHashes:
    kind = change.text("change")
    if kind not in (MODIFY, CREATE):
        raise change.malformed(change.path_of("change"), f"must be {MODIFY!r} or {CREATE!r}, not {shown(kind)}")
    return PatchFileHashes(change.relative("path"), kind, change.text("before", optional=True), change.text("after"))


def _file(item: Fields) -> LockedFile:
    return LockedFile(item.relative("path"), item.text("base_sha256", optional=True), item.text("overlay_sha256"),
                      item.number("mode", MAX_MODE), item.number("uid"), item.number("gid"), item.texts("stale_bytecode", relative=True))


def _dir(item: Fields) -> LockedDir:
    return LockedDir(item.relative("path"), item.number("mode", MAX_MODE), item.number("uid"), item.number("gid"), item.number("mtime"))
