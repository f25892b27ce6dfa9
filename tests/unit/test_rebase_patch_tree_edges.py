"""git's words in a refusal of the patch tree: the tail of its output, and merge-file's conflict count and failure."""

from __future__ import annotations

import os

import pytest

from kvbake.errors import PatchError
from kvbake.rebase.adapters.patch_tree import apply_exactly, apply_with_rejects, merge_three, reverse_exactly

from message_words import says

TWELVE = b"".join(f"diff --git a/f{i} b/f{i}\n--- a/f{i}\n+++ b/f{i}\n@@ -1 +1 @@\n-a\n+b\n".encode() for i in range(12))
ELSEWHERE = {f"f{i}": b"zzz\n" for i in range(12)}


def quoted_output(message: str) -> str:
    return message[message.index("(") + 1:message.rindex(")")]


def test_a_patch_that_no_longer_applies_quotes_the_last_200_characters_of_git_apply():
    with pytest.raises(PatchError) as caught:
        apply_exactly(TWELVE, ELSEWHERE)
    assert len(quoted_output(caught.value.message)) == 200 and says(caught.value.message, "f11: patch does not apply")


def test_a_chain_that_does_not_reverse_quotes_the_last_200_characters_of_git_apply():
    with pytest.raises(PatchError) as caught:
        reverse_exactly(TWELVE, ELSEWHERE)
    assert len(quoted_output(caught.value.message)) == 200 and says(caught.value.message, "patch does not apply")


def test_a_patch_git_cannot_read_is_refused_with_gits_last_line():
    with pytest.raises(PatchError) as caught:
        apply_with_rejects(b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,1 +1,1 @@\n", {"f": b"x\n"})
    assert says(caught.value.message, "corrupt patch at line 5")


def test_more_than_127_conflicts_merge_and_count_as_127():
    base = "".join(f"k{i}\n" + "".join(f"s{i}_{j}\n" for j in range(4)) for i in range(130)).encode()
    merged, conflicts = merge_three(base.replace(b"k", b"c"), base, base.replace(b"k", b"o"))
    assert conflicts == 127 and merged.count(b"<<<<<<< new base\n") == 130


def test_binary_files_are_refused_by_merge_file():
    with pytest.raises(PatchError) as caught:
        merge_three(b"a\0b\n", b"a\0c\n", b"a\0d\n")
    assert says(caught.value.message, "git merge-file failed") and says(caught.value.message, "Cannot merge binary files")
    assert caught.value.fix.startswith("report this with the files")


def test_a_section_for_a_missing_file_is_refused_with_only_gits_last_line():
    with pytest.raises(PatchError) as caught:
        apply_with_rejects(b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\n-y\n+z\n", {"f": None})
    assert says(caught.value.message, "f: No such file or directory") and not says(caught.value.message, "Checking patch f")


def test_git_dying_with_its_fatal_exit_code_128_is_refused_not_taken_for_128_conflicts(tmp_path, monkeypatch):
    dying = tmp_path / "bin" / "git"
    dying.parent.mkdir()
    dying.write_text("#!/bin/sh\necho 'fatal: could not read old-base' >&2\nexit 128\n")
    dying.chmod(0o755)
    monkeypatch.setenv("PATH", f"{dying.parent}:{os.environ['PATH']}")
    with pytest.raises(PatchError) as caught:
        merge_three(b"a\n", b"b\n", b"c\n")
    assert says(caught.value.message, "git merge-file failed") and says(caught.value.message, "could not read old-base")


def test_a_failing_merge_quotes_exactly_the_last_200_characters_of_gits_output(tmp_path, monkeypatch):
    talkative = tmp_path / "bin" / "git"
    talkative.parent.mkdir()
    output = "".join(f"{i:03d}" for i in range(100))  # 300 characters, every tail of them distinct
    talkative.write_text(f"#!/bin/sh\nprintf '%s' '{output}' >&2\nexit 255\n")
    talkative.chmod(0o755)
    monkeypatch.setenv("PATH", f"{talkative.parent}:{os.environ['PATH']}")
    with pytest.raises(PatchError) as caught:
        merge_three(b"a\n", b"b\n", b"c\n")
    assert quoted_output(caught.value.message) == repr(output[-200:])
