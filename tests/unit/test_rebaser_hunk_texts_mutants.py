"""Each hunk of a patch as the chain states it, keyed by its file path and its 1-based number within that file."""

from __future__ import annotations

from kvbake.rebase.adapters.rebaser import hunk_texts

TWO_FILES = (b"diff --git a/pkg/a.py b/pkg/a.py\n"
             b"--- a/pkg/a.py\n"
             b"+++ b/pkg/a.py\n"
             b"@@ -1,3 +1,3 @@\n"
             b" one\n"
             b"-two\n"
             b"+TWO\n"
             b" three\n"
             b"@@ -10,3 +10,3 @@\n"
             b" ten\n"
             b"-eleven\n"
             b"+ELEVEN\n"
             b" twelve\n"
             b"diff --git a/pkg/b.py b/pkg/b.py\n"
             b"--- a/pkg/b.py\n"
             b"+++ b/pkg/b.py\n"
             b"@@ -4,2 +4,2 @@\n"
             b"-four\n"
             b"+FOUR\n"
             b" five\n")


def test_hunks_are_numbered_from_one_within_each_file():
    assert sorted(hunk_texts(TWO_FILES)) == [("pkg/a.py", 1), ("pkg/a.py", 2), ("pkg/b.py", 1)]


def test_each_hunk_is_its_header_and_its_lines_as_the_patch_states_them():
    texts = hunk_texts(TWO_FILES)
    assert texts[("pkg/a.py", 1)] == "@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
    assert texts[("pkg/a.py", 2)] == "@@ -10,3 +10,3 @@\n ten\n-eleven\n+ELEVEN\n twelve\n"
    assert texts[("pkg/b.py", 1)] == "@@ -4,2 +4,2 @@\n-four\n+FOUR\n five\n"


def test_a_hunk_with_utf8_lines_is_read_as_utf8():
    patch = "diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -1,1 +1,1 @@\n-caf\u00e9 = 1\n+caf\u00e9 = 2\n".encode("utf-8")
    assert hunk_texts(patch) == {("f.py", 1): "@@ -1,1 +1,1 @@\n-caf\u00e9 = 1\n+caf\u00e9 = 2\n"}
