"""Tests of parse_patch: the sections a unified diff touches, and every kind it refuses."""

from __future__ import annotations

import pytest

from kvbake.diffs import CREATE, MODIFY, FileChange, parse_patch, relative_source_path
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


def modify(source: str, target: str) -> str:
    return f"--- {source}\n+++ {target}\n@@ -1 +1 @@\n-VALUE = 1\n+VALUE = 2\n"


def test_parses_modify_and_create_sections_in_order() -> None:
    changes = parse_patch("0001", MODIFY_AND_CREATE)
    assert changes == (
        FileChange("pkg/mod.py", MODIFY, ("import sys\n",)),
        FileChange("pkg/new_helper.py", CREATE, ("def helper():\n", "    return 1\n")),
    )


def test_a_diff_without_git_prefixes_keeps_the_path() -> None:
    assert parse_patch("0001", modify("pkg/mod.py", "pkg/mod.py")) == (FileChange("pkg/mod.py", MODIFY, ("VALUE = 2\n",)),)


@pytest.mark.parametrize(("text", "fragment"), [
    (DELETION, "patch 0007 deletes pkg/mod.py"),
    (RENAME, "patch 0007 renames a/pkg/old.py to b/pkg/new.py"),
    (RENAME_WITH_EDIT, "patch 0007 renames a/pkg/old.py to b/pkg/new.py"),
    (BINARY, "patch 0007 has a binary section for pkg/data.bin"),
    (GIT_BINARY, "patch 0007 has a binary section for pkg/data.bin"),
    ("", "patch 0007 touches no file"),
    ("Subject: [PATCH] only words\n\nno diff here\n", "patch 0007 touches no file"),
    (modify("a/../etc/mod.py", "b/../etc/mod.py"), "patch 0007 touches 'b/../etc/mod.py', outside the source root"),
    (modify("/etc/mod.py", "/etc/mod.py"), "patch 0007 touches '/etc/mod.py', outside the source root"),
    ("--- /dev/null\n+++ /etc/new.py\n@@ -0,0 +1 @@\n+x = 1\n", "patch 0007 touches '/etc/new.py', outside the source root"),
    ("diff --git a/pkg/mod.py b/pkg/mod.py\nold mode 100644\nnew mode 100755\n", "patch 0007 section for pkg/mod.py has no hunk"),
    (modify("a/pkg/mod.py", "b/pkg/mod.py") + modify("a/pkg/mod.py", "b/pkg/mod.py").replace("VALUE = 1", "VALUE = 2").replace("+VALUE = 2", "+VALUE = 3"),
     "patch 0007 touches pkg/mod.py in two sections"),
], ids=["delete", "rename", "rename-edit", "binary", "git-binary", "empty", "message-only", "dot-dot", "absolute", "absolute-create",
        "mode-only", "twice"])
def test_refused_patches_raise_patch_error(text: str, fragment: str) -> None:
    with pytest.raises(PatchError) as caught:
        parse_patch("0007", text)
    assert caught.value.exit_code == 5
    assert fragment in caught.value.one_line()
    assert "\n" not in caught.value.one_line()
    assert caught.value.fix


def test_a_hunk_header_that_lies_is_not_a_unified_diff() -> None:
    with pytest.raises(PatchError, match="patch 0007 is not a unified diff"):
        parse_patch("0007", "--- a/x.py\n+++ b/x.py\n@@ -1,5 +1,5 @@\n-a\n+b\n")


@pytest.mark.parametrize(("target", "expected"), [("b/pkg/mod.py", "pkg/mod.py"), ("pkg/mod.py", "pkg/mod.py"), ("b/./pkg/mod.py", "pkg/mod.py")])
def test_relative_source_path_strips_the_b_prefix(target: str, expected: str) -> None:
    assert relative_source_path("0001", target) == expected


@pytest.mark.parametrize("target", ["b/", "b/.", "/abs.py", "b//abs.py", "b/pkg/../../x.py"])
def test_relative_source_path_refuses_paths_outside_the_root(target: str) -> None:
    with pytest.raises(PatchError, match="outside the source root"):
        relative_source_path("0001", target)
