"""The export's folder: refused when it exists (unless forced), written whole in a scratch folder, then renamed into place."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Mapping

from kvbake.atomicfile import fsync_tree, rename_durably
from kvbake.errors import ResourceError, UsageError


def refuse_existing(out: Path, shown: str, force: bool) -> None:
    """An existing folder is replaced only with --force; a file in the way never."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {shown} is a file, not a folder", "pass a folder for the export (it is created)")
    if out.exists() and not force:
        raise UsageError(f"--out {shown} already exists", "pass --force to replace it, or another folder; nothing was written")


def write_export(out: Path, files: Mapping[str, str], shown: str, force: bool) -> None:
    """Write every file into a scratch folder beside `out`, then put it in place: a reader sees the old export or the
    new one, never a mix (with --force the old folder, files of an earlier export included, goes as a whole)."""
    refuse_existing(out, shown, force)
    out = out.absolute()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.partial-"))
    except OSError as err:
        raise ResourceError(f"cannot write {shown}: {err.strerror}", "pass an --out folder this user can write") from None
    try:
        for name, text in sorted(files.items()):
            (scratch / name).write_text(text, encoding="utf-8")
        scratch.chmod(0o755)
        fsync_tree(scratch)
        replace_folder(scratch, out)
    except OSError as err:
        raise ResourceError(f"cannot write {shown}: {err.strerror}", "pass an --out folder this user can write") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def replace_folder(scratch: Path, out: Path) -> None:
    """`scratch` becomes `out`; an existing `out` is moved aside first and removed once the new one is in place."""
    if not out.exists():
        rename_durably(scratch, out)
        return
    aside = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
    aside.rmdir()
    rename_durably(out, aside)
    rename_durably(scratch, out)
    shutil.rmtree(aside, ignore_errors=True)
