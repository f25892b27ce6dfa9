"""Tests of parse_patch: the sections a unified diff touches, and every kind it refuses."""

from __future__ import annotations

import pytest

from kvbake.bake.core.diffs import CREATE, MODIFY, FileChange, normalized_patch, parse_patch, relative_source_path
from kvbake.errors import PatchError

MODIFY_AND_CREATE = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
Subject: [PATCH] two files

---
diff --git a/pkg/mod.py b/pkg/mod.py
index 1111111..2222222 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,3 +1,4 @@
 import os
+import sys
 
 VALUE = 1
diff --git a/pkg/new_helper.py b/pkg/new_helper.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/pkg/new_helper.py
@@ -0,0 +1,2 @@
+def helper():
+    return 1
"""

DELETION = """\
diff --git a/pkg/mod.py b/pkg/mod.py
deleted file mode 100644
index 1111111..0000000
--- a/pkg/mod.py
+++ /dev/null
@@ -1,2 +0,0 @@
-import os
-VALUE = 1
"""

RENAME = """\
diff --git a/pkg/old.py b/pkg/new.py
similarity index 100%
rename from pkg/old.py
rename to pkg/new.py
"""

RENAME_WITH_EDIT = """\
diff --git a/pkg/old.py b/pkg/new.py
similarity index 90%
rename from pkg/old.py
rename to pkg/new.py
index 1111111..2222222 100644
--- a/pkg/old.py
+++ b/pkg/new.py
@@ -1 +1 @@
-VALUE = 1
+VALUE = 2
"""

BINARY = """\
diff --git a/pkg/data.bin b/pkg/data.bin
index 1111111..2222222 100644
Binary files a/pkg/data.bin and b/pkg/data.bin differ
"""

GIT_BINARY = """\
diff --git a/pkg/data.bin b/pkg/data.bin
index 1111111..2222222 100644
GIT binary patch
literal 3
KcmZ?wdI11}0RR91

literal 0
KcmV+b0RR6000031

"""


SYMLINK = """\
diff --git a/pkg/link.py b/pkg/link.py
new file mode 120000
index 0000000..48980ad
--- /dev/null
+++ b/pkg/link.py
@@ -0,0 +1 @@
+/root/.docker/config.json
\\ No newline at end of file
"""

EXECUTABLE = SYMLINK.replace("120000", "100755").replace("link.py", "run.sh")
MODE_CHANGE_WITH_EDIT = """\
diff --git a/pkg/mod.py b/pkg/mod.py
old mode 100644
new mode 100755
index 1111111..2222222
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1 +1 @@
-VALUE = 1
+VALUE = 2
"""

INDEX_SYMLINK = """\
diff --git a/pkg/mod.py b/pkg/mod.py
index 1111111..2222222 120000
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1 +1 @@
-VALUE = 1
+/etc/shadow
"""

COPY = """\
diff --git a/pkg/mod.py b/pkg/copy.py
similarity index 100%
copy from pkg/mod.py
copy to pkg/copy.py
"""

COPY_WITHOUT_SIMILARITY = """\
diff --git a/pkg/copy.py b/pkg/copy.py
copy from pkg/secret.py
copy to pkg/copy.py
--- a/pkg/copy.py
+++ b/pkg/copy.py
@@ -1 +1 @@
-VALUE = 1
+VALUE = 2
"""

REWRITE = """\
diff --git a/pkg/mod.py b/pkg/mod.py
dissimilarity index 90%
index 1111111..2222222 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1 +1 @@
-VALUE = 1
+VALUE = 2
"""

PLAIN_BINARY = "Binary files vllm.orig/pkg/data.bin and vllm/pkg/data.bin differ\n"

DIFF_U = """\
diff -ruN vllm.orig/pkg/mod.py vllm/pkg/mod.py
--- vllm.orig/pkg/mod.py\t2024-05-01 10:00:00.000000000 +0000
+++ vllm/pkg/mod.py\t2024-05-02 11:00:00.000000000 +0000
@@ -1,2 +1,2 @@
 import os
-VALUE = 1
+VALUE = 2
diff -ruN vllm.orig/pkg/new.py vllm/pkg/new.py
--- vllm.orig/pkg/new.py\t1970-01-01 00:00:00.000000000 +0000
+++ vllm/pkg/new.py\t2024-05-02 11:00:00.000000000 +0000
@@ -0,0 +1 @@
+NEW = 1
"""

GIT_FORM_OF_DIFF_U = """\
diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,2 +1,2 @@
 import os
-VALUE = 1
+VALUE = 2
diff --git a/pkg/new.py b/pkg/new.py
new file mode 100644
--- /dev/null
+++ b/pkg/new.py
@@ -0,0 +1,1 @@
+NEW = 1
"""


def modify(source: str, target: str) -> str:
    return f"--- {source}\n+++ {target}\n@@ -1 +1 @@\n-VALUE = 1\n+VALUE = 2\n"


def test_parses_modify_and_create_sections_in_order() -> None:
    changes = parse_patch("0001", MODIFY_AND_CREATE)
    assert changes == (
        FileChange("pkg/mod.py", MODIFY, ("import sys\n",)),
        FileChange("pkg/new_helper.py", CREATE, ("def helper():\n", "    return 1\n")),
    )


@pytest.mark.parametrize(("source", "target"), [
    ("vllm.orig/pkg/mod.py", "vllm/pkg/mod.py"),
    ("a/pkg/mod.py\t2024-05-01 10:00:00.000000000 +0000", "b/pkg/mod.py\t2024-05-02 11:00:00.000000000 +0000"),
    ("a/pkg/mod.py.orig", "b/pkg/mod.py"),
    ("pkg/mod.py", "pkg/mod.py"),
], ids=["folder-orig", "timestamps", "file-orig", "no-prefix"])
def test_plain_diff_names_lose_their_first_component_like_git_apply_p1(source: str, target: str) -> None:
    expected = "mod.py" if source == "pkg/mod.py" else "pkg/mod.py"
    assert parse_patch("0001", modify(source, target)) == (FileChange(expected, MODIFY, ("VALUE = 2\n",)),)


def test_a_diff_u_patch_parses_to_a_modify_and_a_create() -> None:
    assert parse_patch("0001", DIFF_U) == (
        FileChange("pkg/mod.py", MODIFY, ("VALUE = 2\n",)),
        FileChange("pkg/new.py", CREATE, ("NEW = 1\n",)),
    )


def test_a_diff_u_patch_normalizes_to_its_git_form() -> None:
    assert normalized_patch("0001", DIFF_U) == GIT_FORM_OF_DIFF_U
    assert normalized_patch("0001", GIT_FORM_OF_DIFF_U) == GIT_FORM_OF_DIFF_U


def test_normalizing_a_format_patch_drops_message_index_and_section_text() -> None:
    normalized = normalized_patch("0001", MODIFY_AND_CREATE)
    assert normalized.startswith("diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,3 +1,4 @@\n")
    assert "Subject" not in normalized and "index " not in normalized
    assert "new file mode 100644\n--- /dev/null\n+++ b/pkg/new_helper.py\n@@ -0,0 +1,2 @@\n+def helper():\n" in normalized
    assert parse_patch("0001", normalized) == parse_patch("0001", MODIFY_AND_CREATE)


def test_the_no_newline_marker_survives_normalization() -> None:
    text = "--- a/x/y.py\n+++ b/x/y.py\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n"
    assert normalized_patch("0001", text) == "diff --git a/x/y.py b/x/y.py\n" + text.replace("@@ -1 +1 @@", "@@ -1,1 +1,1 @@")


def test_adding_lines_to_an_empty_base_file_is_a_modify_not_a_create() -> None:
    text = "diff --git a/pkg/__init__.py b/pkg/__init__.py\n--- a/pkg/__init__.py\n+++ b/pkg/__init__.py\n@@ -0,0 +1 @@\n+X = 1\n"
    assert parse_patch("0001", text) == (FileChange("pkg/__init__.py", MODIFY, ("X = 1\n",)),)


def test_header_words_in_the_message_or_in_added_lines_are_not_headers() -> None:
    message = "Subject: [PATCH] keep\n\nrename from the old scheme\nnew file mode 120000 is refused\n---\n"
    added = modify("a/pkg/mod.py", "b/pkg/mod.py").replace("+VALUE = 2", "+old mode 100644")
    assert parse_patch("0001", message + added) == (FileChange("pkg/mod.py", MODIFY, ("old mode 100644\n",)),)


@pytest.mark.parametrize(("text", "fragment"), [
    (DELETION, "patch 0007 deletes pkg/mod.py"),
    (RENAME, "patch 0007 renames or copies pkg/new.py (similarity index 100%)"),
    (RENAME_WITH_EDIT, "patch 0007 renames or copies pkg/new.py (similarity index 90%)"),
    (RENAME.replace("similarity index 100%\n", ""), "patch 0007 renames pkg/new.py (rename from pkg/old.py)"),
    (modify("a/pkg/old.py", "b/pkg/new.py"), "patch 0007 renames a/pkg/old.py to b/pkg/new.py"),
    (COPY, "patch 0007 renames or copies pkg/copy.py (similarity index 100%)"),
    (COPY_WITHOUT_SIMILARITY, "patch 0007 copies pkg/copy.py (copy from pkg/secret.py)"),
    (REWRITE, "patch 0007 rewrites pkg/mod.py (dissimilarity index 90%)"),
    (BINARY, "patch 0007 has a binary section for pkg/data.bin (Binary files a/pkg/data.bin and b/pkg/data.bin differ)"),
    (GIT_BINARY, "patch 0007 has a binary section for pkg/data.bin (GIT binary patch)"),
    (PLAIN_BINARY, "patch 0007 has a binary section for pkg/data.bin (Binary files vllm.orig/pkg/data.bin"),
    (SYMLINK, "patch 0007 creates pkg/link.py as a symlink (new file mode 120000)"),
    (EXECUTABLE, "patch 0007 creates pkg/run.sh with mode 100755 (new file mode 100755)"),
    (MODE_CHANGE_WITH_EDIT, "patch 0007 changes the mode of pkg/mod.py (old mode 100644)"),
    (INDEX_SYMLINK, "patch 0007 gives pkg/mod.py the mode 120000 (index 1111111..2222222 120000)"),
    (modify("a/pkg/mod.py", "b/pkg/mod.py").replace("+++ b/pkg/mod.py", '+++ "b/pkg/mo\\td.py"').replace("--- a/pkg/mod.py", '--- "a/pkg/mo\\td.py"'),
     "patch 0007 names '\"b/pkg/mo\\\\td.py\"': quoted names"),
    (modify("a/pkg/mod.py", "b/pkg/mod.py").replace("\n", "\r\n"), "patch 0007 names 'b/pkg/mod.py\\r': quoted names"),
    (modify("mod.py", "mod.py"), "patch 0007 touches 'mod.py', outside the source root"),
    ("", "patch 0007 touches no file"),
    ("Subject: [PATCH] only words\n\nno diff here\n", "patch 0007 touches no file"),
    (modify("a/../etc/mod.py", "b/../etc/mod.py"), "patch 0007 touches 'b/../etc/mod.py', outside the source root"),
    (modify("/etc/mod.py", "/etc/mod.py"), "patch 0007 touches '/etc/mod.py', outside the source root"),
    ("--- /dev/null\n+++ /etc/new.py\n@@ -0,0 +1 @@\n+x = 1\n", "patch 0007 touches '/etc/new.py', outside the source root"),
    ("diff --git a/pkg/mod.py b/pkg/mod.py\nold mode 100644\nnew mode 100755\n", "patch 0007 changes the mode of pkg/mod.py (old mode 100644)"),
    ("diff --git a/pkg/mod.py b/pkg/mod.py\nindex 1111111..2222222 100644\n", "patch 0007 section for pkg/mod.py has no hunk"),
    ("--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -0,0 +1 @@\n+x\n" + modify("a/pkg/mod.py", "b/pkg/mod.py"), "patch 0007 touches pkg/mod.py in two sections"),
    (modify("a/pkg/mod.py", "b/pkg/mod.py") + modify("a/pkg/mod.py", "b/pkg/mod.py").replace("VALUE = 1", "VALUE = 2").replace("+VALUE = 2", "+VALUE = 3"),
     "patch 0007 touches pkg/mod.py in two sections"),
], ids=["delete", "rename", "rename-edit", "rename-lines", "rename-by-names", "copy", "copy-lines", "rewrite", "binary", "git-binary",
        "plain-binary", "symlink", "executable", "mode-change", "index-mode", "quoted-name", "crlf", "no-leading-folder",
        "empty", "message-only", "dot-dot", "absolute", "absolute-create", "mode-only", "no-hunk", "twice-plain", "twice"])
def test_refused_patches_raise_patch_error(text: str, fragment: str) -> None:
    with pytest.raises(PatchError) as caught:
        parse_patch("0007", text)
    assert caught.value.exit_code == 5
    assert fragment in caught.value.one_line()
    assert "\n" not in caught.value.one_line()
    assert caught.value.fix


def test_a_hunk_header_that_lies_is_not_a_unified_diff() -> None:
    with pytest.raises(PatchError) as caught:
        parse_patch("0007", "--- a/x.py\n+++ b/x.py\n@@ -1,5 +1,5 @@\n-a\n+b\n")
    assert caught.value.exit_code == 5
    assert all(field in caught.value.message for field in ("patch 0007", "not a unified diff", "Hunk is shorter than expected"))
    assert "git diff" in caught.value.fix and "diff -u" in caught.value.fix


@pytest.mark.parametrize(("target", "expected"), [("b/pkg/mod.py", "pkg/mod.py"), ("vllm/pkg/mod.py", "pkg/mod.py"), ("b/./pkg/mod.py", "pkg/mod.py")])
def test_relative_source_path_strips_the_first_component(target: str, expected: str) -> None:
    assert relative_source_path("0001", target) == expected


@pytest.mark.parametrize("target", ["b/", "b/.", "/abs.py", "b/pkg/../../x.py", "mod.py"])
def test_relative_source_path_refuses_paths_outside_the_root(target: str) -> None:
    with pytest.raises(PatchError) as caught:
        relative_source_path("0001", target)
    assert caught.value.exit_code == 5
    assert all(field in caught.value.message for field in ("patch 0001", repr(target), "outside the source root"))
    assert "one leading folder" in caught.value.fix


@pytest.mark.parametrize("target", ["b//abs.py", "b/pkg/a b.py", '"b/pkg/x.py"', "b/pkg\\x.py", "b/pkg/x\x00.py", "b/pkg/x\u2028.py"])
def test_relative_source_path_refuses_unusual_names(target: str) -> None:
    with pytest.raises(PatchError) as caught:
        relative_source_path("0001", target)
    assert caught.value.exit_code == 5
    assert all(field in caught.value.message for field in ("patch 0001", repr(target), "are refused"))
    assert "one leading folder" in caught.value.fix
