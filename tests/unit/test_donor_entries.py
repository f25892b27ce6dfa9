"""Tests of lock --donor's import: only tracked regular files are copied, and nothing is written when one entry is refused."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kvbake.bake.adapters.donor import import_patches, patches_from
from kvbake.errors import DonorError, EngineError
from kvbake.manifest import Manifest
from tests.unit.helpers_manifest import minimal_document, tiny_manifest

PATCH = b"--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-A = 1\n+A = 2\n"
SECOND = PATCH.replace(b"A = 2", b"A = 3")


def git(folder: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid",
                "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid"})
    return subprocess.run(["git", "-C", str(folder), *args], env=env, check=True, capture_output=True, text=True).stdout


def donor_with(tmp_path: Path, build) -> tuple[Path, str]:
    """A committed donor checkout; `build(folder)` adds its entries before the commit."""
    donor = tmp_path / "donor"
    (donor / "patches").mkdir(parents=True)
    git(donor, "init", "-q")
    (donor / "patches" / "0001-first.patch").write_bytes(PATCH)
    build(donor)
    git(donor, "add", "-A")
    git(donor, "commit", "-q", "-m", "patches")
    return donor, git(donor, "rev-parse", "HEAD").strip()


def project(tmp_path: Path, revision: str) -> Manifest:
    document = minimal_document()
    document["donor"]["revision"] = revision
    document["chain"] = [{"id": "0001", "file": "patches/0001-first.patch", "role": "feature"},
                         {"id": "0002", "file": "patches/0002-second.patch", "role": "feature"}]
    manifest = tiny_manifest(tmp_path / "project", document)
    for patch in manifest.chain:
        patch.path.unlink()
    return manifest


def test_regular_tracked_patches_are_imported(tmp_path: Path) -> None:
    donor, head = donor_with(tmp_path, lambda d: (d / "patches" / "0002-second.patch").write_bytes(SECOND))
    manifest = project(tmp_path, head)
    assert import_patches(manifest, donor).ids == ["0001", "0002"]
    assert [p.path.read_bytes() for p in manifest.chain] == [PATCH, SECOND]


def test_a_donor_symlink_to_a_file_outside_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    secret = tmp_path / "credentials.json"
    secret.write_text('{"auths": {"registry": "password"}}\n')
    donor, head = donor_with(tmp_path, lambda d: (d / "patches" / "0002-second.patch").symlink_to(secret))
    manifest = project(tmp_path, head)
    with pytest.raises(DonorError) as caught:
        import_patches(manifest, donor)
    assert caught.value.exit_code == 9
    assert caught.value.one_line().startswith("patch 0002: the donor entry patches/0002-second.patch is a symlink, not a regular file")
    assert not any(p.path.exists() for p in manifest.chain)


def test_a_donor_entry_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    donor, _ = donor_with(tmp_path, lambda d: None)
    git(donor, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},patches/0002-second.patch")
    git(donor, "commit", "-q", "-m", "a submodule named like a patch")
    (donor / "patches" / "0002-second.patch").mkdir()
    manifest = project(tmp_path, git(donor, "rev-parse", "HEAD").strip())
    with pytest.raises(DonorError) as caught:
        import_patches(manifest, donor)
    assert caught.value.exit_code == 9
    assert caught.value.one_line().startswith("patch 0002: the donor entry patches/0002-second.patch is a directory, not a regular file")
    assert not any(p.path.exists() for p in manifest.chain)


def test_a_tracked_symlinked_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "0002-second.patch").write_bytes(SECOND)
    donor, head = donor_with(tmp_path, lambda d: (d / "linked").symlink_to(outside))
    manifest = project(tmp_path, head)
    with pytest.raises(DonorError) as caught:
        import_patches(manifest, donor)
    assert caught.value.exit_code == 9
    assert "patch 0002: no file named 0002-second.patch or 0002-*.patch in the donor checkout" in caught.value.one_line()


class UnreachableEngine:
    """An engine that never answers: `lock` fails at its first engine call, after the import."""

    def __init__(self, host: str | None = None) -> None:
        self.label = host or "the local docker engine"

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            raise EngineError(f"{self.label} is unreachable (connection refused)", "start the engine")
        return call


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("layout", ["one-kept-one-new", "folder-new"])
def test_a_lock_that_fails_after_the_import_leaves_the_patches_as_they_were(layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from kvbake.bake import commands
    from kvbake.cli import main

    donor, head = donor_with(tmp_path, lambda d: (d / "patches" / "0002-second.patch").write_bytes(SECOND))
    manifest = project(tmp_path, head)
    if layout == "one-kept-one-new":
        manifest.chain[0].path.write_bytes(b"an older copy of the first patch\n")
    else:
        manifest.chain[0].path.parent.rmdir()
    before = snapshot(manifest.root)
    monkeypatch.setattr(commands, "Engine", UnreachableEngine)
    assert main(["lock", "--manifest", str(manifest.path), "--donor", str(donor)]) == EngineError.exit_code
    err = capsys.readouterr().err
    assert err.startswith("error (engine): the local docker engine is unreachable") and err.count("\n") == 1, err
    assert snapshot(manifest.root) == before


def test_patches_the_written_lock_pins_are_kept_whatever_fails_after_it(tmp_path: Path) -> None:
    donor, head = donor_with(tmp_path, lambda d: (d / "patches" / "0002-second.patch").write_bytes(SECOND))
    manifest = project(tmp_path, head)
    with pytest.raises(OSError):
        with patches_from(manifest, donor) as imported:
            imported.keep()  # what swap_overlay calls once the lock is written
            raise OSError("a later step of the folder swap failed")
    assert [p.path.read_bytes() for p in manifest.chain] == [PATCH, SECOND]
