"""Replace overlay/ and the lock crash-safely (the lock is the commit point) and recover from an interrupted swap."""

# A swap runs these steps; a kill between any two leaves a state `recover_overlay` resolves on the next `lock`:
#   building   overlay.tmp.<token>/ exists, holding overlay/README.md so far        → discarded
#   built      overlay.tmp.<token>/ holds every patched file, synced to disk          → discarded
#   staged     renamed to overlay.new.<tag>/ (tag = lock sha256 prefix + token)      → discarded (lock not written)
#   lock-temp  the new lock sits in a temporary file beside the lock                  → temporary file removed
#   locked     the lock is replaced: the swap is committed                           → rolled forward
#   retired    overlay/ renamed to overlay.old.<tag>/                                → rolled forward
#   placed     overlay.new.<tag>/ renamed to overlay/                                → overlay.old.<tag>/ removed
#   done       overlay.old.<tag>/ removed
# A folder is discarded by renaming it to overlay.tmp.<token>/ first, so a half-removed folder is always scratch.
# KVBAKE_TEST_KILL_AT=<step> (test-only) makes the process SIGKILL itself right after that step.

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import re
import secrets
import shutil
import signal
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from kvbake.atomicfile import fsync_folder, fsync_tree, partial_files, rename_durably, write_atomic
from kvbake.errors import LockError, ResourceError

log = logging.getLogger(__name__)
OVERLAY = "overlay"
README = "README.md"
SCRATCH = "overlay.tmp."
STAGED = "overlay.new"
RETIRED = "overlay.old"
STEPS = ("building", "built", "staged", "lock-temp", "locked", "retired", "placed", "done")
KILL_ENV = "KVBAKE_TEST_KILL_AT"
NAME = re.compile(r"^overlay\.(new|old)(?:\.([0-9a-f]{16})-[0-9a-f]{8})?$")
UNRESOLVED_FIX = "keep the folder you want as overlay/ (with its README.md), delete the other, then run python build.py lock"


def kill_point(step: str) -> None:
    """Test-only: SIGKILL this process right after `step` when KVBAKE_TEST_KILL_AT names it."""
    if os.environ.get(KILL_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def exclusive(manifest_path: Path) -> Iterator[None]:
    """Hold an advisory lock on the manifest file, so two `lock` runs never swap the same overlay/ at once."""
    handle = os.open(manifest_path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockError(f"another python build.py lock is running on {manifest_path.name}",
                            "wait for it to finish, then run lock again") from None
        yield
    finally:
        os.close(handle)


@dataclass(frozen=True)
class Found:
    """The swap folders on disk: whether overlay/ exists, and the names of the staged and retired folders."""

    overlay: bool
    swap_folders: tuple[str, ...]


def recovery_steps(found: Found, lock_sha256: str | None, lock_name: str) -> tuple[tuple[str, str, str], ...]:
    """What recovery does, as ("discard", name, "") and ("rename", old, new) steps: roll forward every swap the
    current lock commits, roll back every other one; a state that fits neither is a LockError."""
    present = set(found.swap_folders) | ({OVERLAY} if found.overlay else set())
    steps: list[tuple[str, str, str]] = []
    for tag in sorted({swap_tag(name) for name in found.swap_folders}):
        staged, retired = swap_name(STAGED, tag), swap_name(RETIRED, tag)
        committed = bool(tag) and lock_sha256 is not None and lock_sha256.startswith(tag.split("-")[0])
        plan = _roll_forward(present, staged, retired) if committed else _roll_back(present, staged, retired, lock_name)
        for step in plan:
            present.discard(step[1])
            if step[0] == "rename":
                present.add(step[2])
        steps += plan
    return tuple(steps)


def _roll_forward(present: set[str], staged: str, retired: str) -> list[tuple[str, str, str]]:
    overlay = OVERLAY in present
    if staged not in present:
        return [("discard", retired, "")] if overlay else [("rename", retired, OVERLAY)]
    if overlay and retired in present:
        raise LockError(f"overlay/, {staged}/ and {retired}/ all exist after an interrupted lock", UNRESOLVED_FIX)
    steps = [("rename", OVERLAY, retired)] if overlay else []
    steps.append(("rename", staged, OVERLAY))
    if overlay or retired in present:
        steps.append(("discard", retired, ""))
    return steps


def _roll_back(present: set[str], staged: str, retired: str, lock_name: str) -> list[tuple[str, str, str]]:
    steps = []
    if staged in present:
        steps.append(("discard", staged, ""))
    if retired in present:
        if OVERLAY in present:
            raise LockError(f"overlay/ and {retired}/ both exist after an interrupted lock, and {lock_name} is not the lock "
                            "they were swapped for", UNRESOLVED_FIX)
        steps.append(("rename", retired, OVERLAY))
    return steps


def swap_tag(name: str) -> str:
    match = NAME.match(name)
    return name[len(STAGED) + 1:] if match and match.group(2) else ""


def swap_name(kind: str, tag: str) -> str:
    return f"{kind}.{tag}" if tag else kind


def find_swap_folders(root: Path) -> Found:
    names = tuple(sorted(p.name for p in root.iterdir() if NAME.match(p.name) and p.is_dir())) if root.is_dir() else ()
    return Found((root / OVERLAY).exists(), names)


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def recover_overlay(root: Path, lock_path: Path) -> tuple[str, ...]:
    """Resolve whatever an interrupted swap left in `root`; returns what was done (nothing when there was nothing)."""
    done = []
    for scratch in sorted(p for p in root.glob(SCRATCH + "*") if p.is_dir()):
        _remove(scratch)
        done.append(f"removed {scratch.name}")
    for temporary in partial_files(lock_path):
        temporary.unlink()
        done.append(f"removed {temporary.name}")
    for kind, name, target in recovery_steps(find_swap_folders(root), file_sha256(lock_path), lock_path.name):
        if kind == "rename":
            rename_durably(root / name, root / target)
            done.append(f"renamed {name}/ to {target}/")
        else:
            discard(root / name)
            done.append(f"removed {name}/")
    for line in done:
        log.warning("recovered an interrupted lock: %s", line)
    return tuple(done)


def _remove(folder: Path) -> None:
    shutil.rmtree(folder)
    fsync_folder(folder.parent)


def discard(folder: Path) -> None:
    """Rename to scratch first, so a removal cut short leaves only scratch behind."""
    scratch = folder.with_name(SCRATCH + secrets.token_hex(4))
    rename_durably(folder, scratch)
    _remove(scratch)


def swap_overlay(root: Path, tree: Mapping[str, bytes], lock_path: Path, lock_data: bytes,
                 committed: Callable[[], None] | None = None) -> None:
    """Write `lock_data` to `lock_path` and make overlay/ exactly `tree` plus the kept README.md, crash-safely;
    `committed` runs once the lock is written (the commit point)."""
    overlay = root / OVERLAY
    if README in tree and (overlay / README).is_file():
        raise LockError(f"the chain writes {README} at the source root, which would replace overlay/{README}",
                        f"rename the patched file, or move overlay/{README} aside")
    tag = f"{hashlib.sha256(lock_data).hexdigest()[:16]}-{secrets.token_hex(4)}"
    with filesystem_errors():
        staged = stage(root, tree, swap_name(STAGED, tag))
        try:
            write_atomic(lock_path, lock_data, before_rename=lambda: kill_point("lock-temp"))
        except BaseException:
            discard(staged)
            raise
        if committed is not None:
            committed()
        kill_point("locked")
    with filesystem_errors(committed=True):
        retired = root / swap_name(RETIRED, tag)
        if overlay.exists():
            rename_durably(overlay, retired)
        kill_point("retired")
        rename_durably(staged, overlay)
        kill_point("placed")
        if retired.exists():
            discard(retired)
        kill_point("done")


def stage(root: Path, tree: Mapping[str, bytes], name: str) -> Path:
    """A complete, synced copy of the new overlay/ under `name`, built in scratch first."""
    scratch = root / (SCRATCH + secrets.token_hex(4))
    scratch.mkdir()
    try:
        readme = root / OVERLAY / README
        if readme.is_file():
            shutil.copy2(readme, scratch / README)
        kill_point("building")
        for path, data in sorted(tree.items()):
            (scratch / path).parent.mkdir(parents=True, exist_ok=True)
            (scratch / path).write_bytes(data)
        fsync_tree(scratch)
        kill_point("built")
        rename_durably(scratch, root / name)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    kill_point("staged")
    return root / name


@contextmanager
def filesystem_errors(committed: bool = False) -> Iterator[None]:
    """A failed write is a ResourceError (disk full) or a LockError, naming what was done and the fix."""
    try:
        yield
    except OSError as err:
        state = ("the new lock is written; run python build.py lock again to finish the swap" if committed
                 else "nothing was changed; fix the cause, then run python build.py lock again")
        cls = ResourceError if err.errno in (errno.ENOSPC, errno.EDQUOT) else LockError
        raise cls(f"writing overlay/ or the lock failed: {err.strerror or type(err).__name__} ({Path(err.filename or '').name})",
                  state) from None
