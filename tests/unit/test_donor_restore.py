"""Putting the patch paths back after a failed `lock --donor`, and the folders an import would create."""

from __future__ import annotations

from kvbake.bake.adapters.donor import ImportedPatches


def test_restore_puts_old_bytes_back_removes_new_files_and_empty_new_folders(tmp_path):
    old = tmp_path / "patches" / "0001.patch"
    old.parent.mkdir()
    old.write_bytes(b"imported")
    new_folder = tmp_path / "more"
    new_folder.mkdir()
    new = new_folder / "0002.patch"
    new.write_bytes(b"imported")
    never_written = tmp_path / "patches" / "0003.patch"
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "someone-elses.txt").write_text("kept")
    ImportedPatches(["0001", "0002", "0003"], {old: b"before", new: None, never_written: None}, [busy, new_folder]).restore()
    assert old.read_bytes() == b"before" and not new.exists() and not never_written.exists()
    assert not new_folder.exists() and (busy / "someone-elses.txt").read_text() == "kept"


def test_kept_patches_are_not_restored(tmp_path):
    path = tmp_path / "0001.patch"
    path.write_bytes(b"imported")
    imported = ImportedPatches(["0001"], {path: None}, [])
    imported.keep()
    imported.restore()
    assert imported.kept is True and path.read_bytes() == b"imported"


def test_the_missing_folders_of_a_path_are_listed_outermost_first(tmp_path):
    from kvbake.bake.adapters.donor import missing_folders

    assert missing_folders(tmp_path / "a" / "b" / "c") == [tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"]
    (tmp_path / "a").mkdir()
    assert missing_folders(tmp_path / "a" / "b") == [tmp_path / "a" / "b"] and missing_folders(tmp_path / "a") == []
