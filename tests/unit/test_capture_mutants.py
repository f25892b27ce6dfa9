"""`init --capture`'s patches: a patch file's slug, the fixed author, unsigned commits, nested and top-level paths, a
served file changed from the image's (an empty one too, applied as the chain applies it), the patches folder, and a git
failure's error."""

from __future__ import annotations

import pytest

from kvbake.bake.adapters import capture
from kvbake.bake.adapters.capture import commit, git, one_patch, slug, write_captured
from kvbake.bake.adapters.gitapply import GitResult, apply_strictly
from kvbake.bake.core.served_overlay import ServedFile, ServedOverlay
from kvbake.digests import sha256_hex
from kvbake.errors import PatchError


@pytest.mark.parametrize(("path", "expected"), [
    ("pkg/Mod.py", "pkg-Mod"),
    ("pkg/a.b.py", "pkg-a-b"),
    ("pkg/a.b.c.py", "pkg-a-b-c"),
    ("pkg/__init__.py", "pkg-init"),
    ("vllm/X.py", "vllm-X"),
    ("a" * 60 + ".py", "a" * 48),
    ("_.py", "file"),
])
def test_a_patch_files_slug_keeps_letters_and_digits_of_the_path_without_its_suffix(path, expected):
    assert slug(path) == expected


def test_a_failing_git_names_its_subcommand_and_only_its_last_output_line_and_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(capture, "run_git", lambda args, tree: GitResult(128, "first-line\nsecond-line\nlast-line\n"))
    with pytest.raises(PatchError) as failed:
        git(["format-patch", "-1"], tmp_path)
    assert "format-patch" in failed.value.message and "last-line" in failed.value.message
    assert "second-line" not in failed.value.message and "first-line" not in failed.value.message
    assert failed.value.fix


def test_a_commit_is_unsigned_even_where_the_repository_asks_for_signatures(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    git(["init", "-q", "."], tree)
    git(["config", "commit.gpgsign", "true"], tree)
    git(["config", "gpg.program", "false"], tree)
    commit(tree, "unsigned")
    assert git(["log", "-1", "--format=%s"], tree).strip() == b"unsigned"


def test_a_patch_carries_the_fixed_capture_author(tmp_path):
    patch = one_patch("a.py", None, b"new\n", "captured a.py", tmp_path)
    assert b"\nFrom: kvbake init --capture <capture@kvbake.invalid>\n" in patch


def test_a_patch_changes_a_nested_file_from_the_images_bytes(tmp_path):
    patch = one_patch("pkg/sub/mod.py", b"old\n", b"new\n", "captured pkg/sub/mod.py", tmp_path)
    assert b"+++ b/pkg/sub/mod.py\n" in patch and b"\n-old\n" in patch and b"\n+new\n" in patch
    assert b"new file mode" not in patch


def test_a_patch_creates_a_top_level_file_the_image_lacks(tmp_path):
    patch = one_patch("top.py", None, b"new\n", "captured top.py", tmp_path)
    assert b"new file mode" in patch and b"+++ b/top.py\n" in patch


def overlay(path: str, data: bytes, before: bytes | None) -> ServedOverlay:
    found = ServedFile(path, sha256_hex(data), sha256_hex(before) if before is not None else None, "mounted from /x")
    return ServedOverlay("/usr/lib/py", "sha256:i", (found,))


def test_a_captured_patch_changes_the_images_file_into_the_served_one(tmp_path):
    project = tmp_path / "project"
    (entry,) = write_captured(overlay("pkg/mod.py", b"served\n", b"image\n"), {"pkg/mod.py": b"served\n"}, {"pkg/mod.py": b"image\n"}, project)
    patch = (project / entry["file"]).read_bytes()
    assert entry["id"] == "cap001" and entry["file"] == "patches/cap001-pkg-mod.patch"
    assert b"\n-image\n" in patch and b"\n+served\n" in patch and b"new file mode" not in patch


def test_capture_writes_into_an_existing_patches_folder(tmp_path):
    project = tmp_path / "project"
    (project / "patches").mkdir(parents=True)
    (entry,) = write_captured(overlay("a.py", b"served\n", None), {"a.py": b"served\n"}, {}, project)
    assert (project / entry["file"]).is_file()


def test_capture_creates_the_project_folder_when_missing(tmp_path):
    project = tmp_path / "new" / "project"
    (entry,) = write_captured(overlay("a.py", b"served\n", None), {"a.py": b"served\n"}, {}, project)
    assert (project / entry["file"]).is_file()


@pytest.mark.parametrize(("image", "served"), [(b"", b"served = 1\n"), (b"image = 1\n", b"")],
                         ids=["empty in the image", "emptied by the serve"])
def test_a_captured_patch_of_a_file_empty_on_one_side_applies_strictly_to_the_images_files(tmp_path, image, served):
    """An empty file the image holds is a file, not an absent one: its patch changes it, and git apply takes it."""
    project = tmp_path / "project"
    (entry,) = write_captured(overlay("pkg/mod.py", served, image), {"pkg/mod.py": served}, {"pkg/mod.py": image}, project)
    tree = tmp_path / "image"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "mod.py").write_bytes(image)
    apply_strictly(entry["id"], project / entry["file"], tree)
    assert (tree / "pkg" / "mod.py").read_bytes() == served and sorted(p.name for p in (tree / "pkg").iterdir()) == ["mod.py"]
