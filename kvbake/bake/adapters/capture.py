"""Adapter: the files a serve runs over its image, written as git-format patches (one per file) for `init --capture`."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any, Mapping

from kvbake.bake.adapters.gitapply import run_git
from kvbake.bake.core.served_overlay import ServedOverlay
from kvbake.errors import PatchError

AUTHOR = ("kvbake init --capture", "capture@kvbake.invalid")
FIXED_DATE = "2000-01-01T00:00:00+00:00"  # the patches depend only on the bytes they carry
CAPTURED_ROLE = "captured"


def captured_id(number: int) -> str:
    return f"cap{number:03d}"


def slug(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", path.rsplit(".", 1)[0]).strip("-")[-48:] or "file"


def git(args: list[str], tree: Path) -> bytes:
    done = run_git(["-c", f"user.name={AUTHOR[0]}", "-c", f"user.email={AUTHOR[1]}", *args], tree)
    if done.returncode != 0:
        raise PatchError(f"init --capture: git {args[0]} failed ({done.output.strip().splitlines()[-1:]})", "check that git works on this host")
    return done.stdout


def commit(tree: Path, message: str) -> None:
    git(["add", "-A", "."], tree)
    env_dates = ["-c", "commit.gpgsign=false"]
    git([*env_dates, "commit", "-q", "--allow-empty", "--date", FIXED_DATE, "-m", message], tree)


def one_patch(path: str, before: bytes | None, after: bytes, subject: str, scratch: Path) -> bytes:
    """A git-format patch taking one file from the image's bytes (or nothing) to the served bytes."""
    tree = scratch / "tree"
    tree.mkdir()
    git(["init", "-q", "."], tree)
    target = tree / path
    target.parent.mkdir(parents=True, exist_ok=True)
    if before is not None:
        target.write_bytes(before)
    commit(tree, "the image's file")
    target.write_bytes(after)
    commit(tree, subject)
    return git(["format-patch", "-1", "--stdout", "--binary", "--full-index", "--no-signature", "--zero-commit", "HEAD"], tree)


def write_captured(served: ServedOverlay, data: Mapping[str, bytes], base: Mapping[str, bytes | None], project: Path) -> list[dict[str, Any]]:
    """Write `patches/capNNN-*.patch` for every served file into the project; the manifest's chain entries for them."""
    entries = []
    (project / "patches").mkdir(parents=True, exist_ok=True)
    for number, found in enumerate(served.files, 1):
        summary = f"captured from the serve: {found.path} ({found.how}), sha256 {found.sha256}"
        with tempfile.TemporaryDirectory(prefix="kvbake-capture-") as folder:
            patch = one_patch(found.path, base.get(found.path), data[found.path], f"captured {found.path}", Path(folder))
        name = f"patches/{captured_id(number)}-{slug(found.path)}.patch"
        (project / name).write_bytes(patch)
        entries.append({"id": captured_id(number), "file": name, "role": CAPTURED_ROLE, "summary": summary})
    return entries
