"""Adapter: import the manifest's selected patches from a clean donor git checkout at the pinned revision."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path, PurePosixPath
from typing import Iterator

from kvbake.bake.core.nofollow import NotRegularFile, read_regular
from kvbake.errors import DonorError
from kvbake.manifest import Manifest


def _git(donor: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"})
    # core.excludesFile: otherwise git still reads the caller's default global ignore file ($XDG_CONFIG_HOME/git/ignore)
    done = subprocess.run(["git", "-c", f"core.excludesFile={os.devnull}", "-C", str(donor), *args],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DonorError(f"{donor.name} is not a readable git checkout ({done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'git failed'})",
                         "pass --donor the folder of a clean clone of the donor repository")
    return done.stdout


def check_donor(manifest: Manifest, donor: Path) -> None:
    if not donor.is_dir():
        raise DonorError(f"donor folder {donor} does not exist", "clone the donor repository and pass its folder")
    head = _git(donor, "rev-parse", "HEAD").strip()
    if head != manifest.donor.revision:
        raise DonorError(f"donor checkout is at {head[:12]}, the manifest pins {manifest.donor.revision[:12]}",
                         f"run: git -C {donor.name} checkout {manifest.donor.revision}")
    dirty = _git(donor, "status", "--porcelain", "--untracked-files=normal").strip()
    if dirty:
        first = dirty.splitlines()[0]
        raise DonorError(f"donor checkout is dirty ({len(dirty.splitlines())} changes, e.g. {first.strip()})",
                         "commit, stash or discard the changes (git stash -u), or use a fresh clone")


def find_in_donor(tracked: list[str], patch_file: str, patch_id: str) -> str:
    name = PurePosixPath(patch_file).name
    matches = [path for path in tracked if PurePosixPath(path).name == name]
    if not matches:
        prefix = f"{patch_id}-"
        matches = [path for path in tracked if PurePosixPath(path).name.startswith(prefix) and path.endswith(".patch")]
    if len(matches) != 1:
        what = "no file" if not matches else f"{len(matches)} files"
        raise DonorError(f"patch {patch_id}: {what} named {name} or {patch_id}-*.patch in the donor checkout",
                         "fix chain[].file to the donor's patch file name")
    return matches[0]


def read_donor_patch(donor: Path, relative: str, patch_id: str) -> bytes:
    """The donor entry's bytes; it must be a regular file reached without following a symlink."""
    try:
        data = read_regular(donor, relative)
    except NotRegularFile as err:
        raise DonorError(f"patch {patch_id}: the donor entry {relative} is {err.kind}, not a regular file",
                         "the donor must hold each selected patch as a plain tracked file; fix the donor or chain[].file") from None
    if data is None:
        raise DonorError(f"patch {patch_id}: the donor entry {relative} is tracked but absent from the checkout", "use a fresh clone of the donor")
    return data


class ImportedPatches:
    """The selected patches copied from a donor, and what their paths held before, until the lock that pins them is
    written: `restore` puts every path back (old bytes kept, new files and folders removed) unless `keep` came first."""

    def __init__(self, ids: list[str], before: dict[Path, bytes | None], folders: list[Path]) -> None:
        self.ids, self.before, self.folders, self.kept = ids, before, folders, False

    def keep(self) -> None:
        self.kept = True

    def restore(self) -> None:
        if self.kept:
            return
        for path, data in self.before.items():
            if data is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(data)
        for folder in reversed(self.folders):
            with contextlib.suppress(OSError):
                folder.rmdir()


def missing_folders(folder: Path) -> list[Path]:
    """The folders a `mkdir(parents=True)` of `folder` would create, outermost first."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    return missing[::-1]


def import_patches(manifest: Manifest, donor: Path) -> ImportedPatches:
    """Copy exactly the selected patches (tracked regular files at the pinned revision) into the manifest's patch paths;
    every entry is read and checked before the first one is written, and a failed write puts every path back."""
    donor = Path(donor)
    check_donor(manifest, donor)
    tracked = _git(donor, "ls-files", "-z").split("\0")
    found = [(patch, read_donor_patch(donor, find_in_donor([t for t in tracked if t], patch.file, patch.id), patch.id)) for patch in manifest.chain]
    before = {patch.path: (patch.path.read_bytes() if patch.path.is_file() else None) for patch, _ in found}
    folders = [folder for patch, _ in found for folder in missing_folders(patch.path.parent)]
    imported = ImportedPatches([patch.id for patch, _ in found], before, list(dict.fromkeys(folders)))
    try:
        for patch, data in found:
            patch.path.parent.mkdir(parents=True, exist_ok=True)
            patch.path.write_bytes(data)
    except BaseException:
        imported.restore()
        raise
    return imported


@contextlib.contextmanager
def patches_from(manifest: Manifest, donor: Path | None) -> Iterator[ImportedPatches | None]:
    """Import the selected patches from `donor` (nothing when it is None) for the block; if the block fails before it
    calls `keep`, every patch path is as it was before."""
    if donor is None:
        yield None
        return
    imported = import_patches(manifest, donor)
    try:
        yield imported
    except BaseException:
        imported.restore()
        raise
