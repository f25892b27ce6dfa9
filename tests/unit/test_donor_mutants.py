"""Donor checks run git shielded from the caller's git settings and locale, name what they find, and import into new nested folders."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvbake.bake.adapters.donor import check_donor, find_in_donor, import_patches
from kvbake.errors import DonorError
from kvbake.manifest import Manifest
from message_words import says
from tests.unit.helpers_manifest import minimal_document, tiny_manifest
from tests.unit.test_donor_entries import PATCH, donor_with, git, project


def refused(call) -> DonorError:
    with pytest.raises(DonorError) as caught:
        call()
    assert caught.value.exit_code == 9
    return caught.value


def clean_donor(tmp_path: Path) -> tuple[Manifest, Path]:
    """A committed donor holding only patch 0001, and a manifest pinning its head."""
    donor, head = donor_with(tmp_path, lambda d: None)
    return project(tmp_path, head), donor


def git_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """Put a stand-in `git` first on PATH whose shell `body` runs in place of git ($REAL is the real git)."""
    real = shutil.which("git")
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "git"
    script.write_text(f"#!/bin/sh\nREAL='{real}'\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{Path(real).parent}")


def broken_config(tmp_path: Path) -> Path:
    """A git config file git refuses to read: any git that reads it stops with exit 128."""
    config = tmp_path / "broken.gitconfig"
    config.write_text("[core]\n\tfilemode = notabool\n")
    return config


# -- _git: the caller's environment does not reach git ------------------------------------------------------

def test_a_git_dir_in_the_callers_environment_does_not_redirect_the_donor_check(tmp_path, monkeypatch):
    manifest, donor = clean_donor(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    git(other, "commit", "-q", "--allow-empty", "-m", "another history")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    check_donor(manifest, donor)


def test_the_callers_global_git_config_is_never_read(tmp_path, monkeypatch):
    manifest, donor = clean_donor(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(broken_config(tmp_path), home / ".gitconfig")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    check_donor(manifest, donor)  # a git that read it would stop, and the donor would be refused as unreadable


def test_the_machines_system_git_config_is_never_read(tmp_path, monkeypatch):
    manifest, donor = clean_donor(tmp_path)
    git_on_path(tmp_path, monkeypatch, f"GIT_CONFIG_SYSTEM='{broken_config(tmp_path)}' exec \"$REAL\" \"$@\"")
    check_donor(manifest, donor)


def test_git_runs_in_the_c_locale_whatever_the_callers_locale(tmp_path, monkeypatch):
    manifest, donor = clean_donor(tmp_path)
    record = tmp_path / "locales.txt"
    git_on_path(tmp_path, monkeypatch, f"printf '%s\\n' \"${{LC_ALL-unset}}\" >> '{record}'\nexec \"$REAL\" \"$@\"")
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    monkeypatch.setenv("LANG", "de_DE.UTF-8")
    check_donor(manifest, donor)
    assert record.read_text().splitlines() == ["C", "C"]


def test_a_folder_that_is_no_checkout_is_refused_with_gits_reason(tmp_path):
    manifest, _ = clean_donor(tmp_path)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert says(refused(lambda: check_donor(manifest, plain)).message, "not a git repository")


def test_a_git_that_fails_without_a_word_is_refused_as_git_failed(tmp_path, monkeypatch):
    manifest, donor = clean_donor(tmp_path)
    git_on_path(tmp_path, monkeypatch, "exit 128")
    assert says(refused(lambda: check_donor(manifest, donor)).message, "git failed")


# -- check_donor ---------------------------------------------------------------------------------------------

def test_a_donor_at_another_revision_names_both_short_revisions(tmp_path):
    donor, head = donor_with(tmp_path, lambda d: None)
    pinned = "0123456789abcdef0123456789abcdef01234567"
    manifest = project(tmp_path, pinned)
    message = refused(lambda: check_donor(manifest, donor)).message
    assert says(message, head[:12]) and says(message, pinned[:12])


def test_a_donor_configured_to_hide_untracked_files_is_still_dirty(tmp_path):
    manifest, donor = clean_donor(tmp_path)
    git(donor, "config", "status.showUntrackedFiles", "no")
    (donor / "notes.txt").write_text("work in progress\n")
    assert says(refused(lambda: check_donor(manifest, donor)).message, "notes.txt")


# -- find_in_donor -------------------------------------------------------------------------------------------

def test_the_exact_file_name_wins_over_other_files_of_the_same_id():
    tracked = ["patches/0001-first.patch", "patches/0001-first-v2.patch"]
    assert find_in_donor(tracked, "vendor/0001-first.patch", "0001") == "patches/0001-first.patch"


def test_an_exact_file_name_is_found_even_without_the_id_prefix():
    assert find_in_donor(["patches/kv-packing.patch"], "patches/kv-packing.patch", "0001") == "patches/kv-packing.patch"


def test_a_renamed_patch_is_found_by_its_id_and_only_among_patch_files():
    tracked = ["patches/0002-notes.txt", "patches/0002-second.patch", "patches/00020-other.patch"]
    assert find_in_donor(tracked, "patches/0002-renamed.patch", "0002") == "patches/0002-second.patch"


# -- import_patches ------------------------------------------------------------------------------------------

def test_patches_are_imported_into_nested_folders_that_do_not_exist_yet(tmp_path):
    donor, head = donor_with(tmp_path, lambda d: None)
    document = minimal_document()
    document["donor"]["revision"] = head
    document["chain"] = [{"id": "0001", "file": "vendor/kv/0001-first.patch", "role": "feature"}]
    manifest = tiny_manifest(tmp_path / "project", document)
    shutil.rmtree(manifest.root / "vendor")
    imported = import_patches(manifest, donor)
    assert manifest.chain[0].path.read_bytes() == PATCH
    assert imported.folders == [manifest.root / "vendor", manifest.root / "vendor" / "kv"]


def test_the_callers_default_global_ignore_file_does_not_hide_a_dirty_donor(tmp_path, monkeypatch):
    # git reads $XDG_CONFIG_HOME/git/ignore even when no global config file is read at all
    manifest, donor = clean_donor(tmp_path)
    (donor / "notes.txt").write_text("work in progress\n")
    config = tmp_path / "config"
    (config / "git").mkdir(parents=True)
    (config / "git" / "ignore").write_text("*\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    assert says(refused(lambda: check_donor(manifest, donor)).message, "notes.txt")
