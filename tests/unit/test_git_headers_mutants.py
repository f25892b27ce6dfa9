"""Which path a refused header names: hunk bodies are skipped exactly, and each header form states its new-side name."""

from __future__ import annotations

import pytest

from kvbake.bake.core.git_headers import refuse_special_headers
from kvbake.errors import PatchError
from message_words import says

MOD_HEADER = "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
MODE_CHANGE = "old mode 100644\n"


def refusal(text: str) -> PatchError:
    with pytest.raises(PatchError) as caught:
        refuse_special_headers("0007", text)
    return caught.value


def names_mode_change_of(text: str, path: str) -> bool:
    return says(refusal(text).message, f"changes the mode of {path} (old mode 100644)")


@pytest.mark.parametrize("hunk", [
    "@@ -1,2 +1,3 @@\n context\n-old\n+new\n+++ b/evil.py\n",
    "@@ -1,2 +1,3 @@\n\n-old\n+new\n+++ b/evil.py\n",
    "@@ -1,2 +1,3 @@\n\r\n-old\n+new\n+++ b/evil.py\n",
    "@@ -1 +1,2 @@\n-old\n\\ No newline at end of file\n+new\n+++ b/evil.py\n",
    "@@ -1 +1 @@\n+new\n+++ b/evil.py\n-old\n",
    "@@ -1,2 +1 @@\n+new\n-old\n\\ No newline at end of file\n+++ b/evil.py\n",
], ids=["context", "blank-context", "crlf-blank-context", "no-newline-marker", "more-added-than-stated", "marker-then-more-added"])
def test_a_header_like_line_inside_a_hunk_does_not_rename_the_section(hunk: str) -> None:
    assert names_mode_change_of(MOD_HEADER + hunk + MODE_CHANGE, "pkg/mod.py")


@pytest.mark.parametrize("hunk", [
    "@@ -1,2 +1,2 @@\n-old\n+new\n context\n",
    "@@ -1 +1 @@\n-old\n+new\n",
    "@@ -1 +1 @@\n+new\n-old\n",
    "@@ -1 +1 @@\n-old\n+new\n\\ No newline at end of file\n",
    "@@ -0,0 +1 @@\n+new\n",
    "@@ -0,0 +1,2 @@\n+one\n+two\n",
    "@@ -1 +0,0 @@\n-old\n",
    "@@ -1,2 +1,2 @@\n-old\n+new\nIndex: pkg/two.py\n",
], ids=["ends-in-context", "ends-in-added", "ends-in-removed", "ends-in-marker", "only-added", "only-two-added", "only-removed", "short-then-svn-index"])
def test_a_hunk_ends_where_its_counts_end_and_the_next_plain_section_is_read(hunk: str) -> None:
    assert names_mode_change_of(MOD_HEADER + hunk + "--- a/pkg/two.py\n+++ b/pkg/two.py\n" + MODE_CHANGE, "pkg/two.py")


def test_a_plain_diff_section_is_named_by_its_new_side() -> None:
    assert names_mode_change_of("--- a/pkg/mod.py\n+++ b/pkg/mod.py\n" + MODE_CHANGE, "pkg/mod.py")


def test_a_line_before_the_first_header_is_not_a_hunk_line() -> None:
    assert names_mode_change_of("+1 from review\n+++ b/pkg/mod.py\n" + MODE_CHANGE, "pkg/mod.py")


def test_a_refused_line_before_any_name_names_an_unnamed_file() -> None:
    assert names_mode_change_of("--- a/pkg/mod.py\n" + MODE_CHANGE, "(unnamed file)")


def test_the_old_side_line_keeps_the_name_the_git_header_stated() -> None:
    assert names_mode_change_of("diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n" + MODE_CHANGE, "pkg/mod.py")


@pytest.mark.parametrize(("header", "path"), [
    ("diff --git a/my file.py b/my file.py", "my file.py"),
    ("diff --git a/docs b/guide.md b/guide.md", "guide.md"),
    ("diff --git  b/my file.py", "my file.py"),
    ("diff --git a/pkg/ b/pkg/", "pkg/"),
    ("diff --git i/pkg/mod.py w/pkg/mod.py", "pkg/mod.py"),
    ("diff --git i/my dir/file.py w/new.py", "new.py"),
    ("+++ b/my file.py\t2024-05-01 10:00:00.000000000 +0000", "my file.py"),
    ("+++ b/pkg/mod.py\t2024-05-01 10:00:00.000000000 +0000", "pkg/mod.py"),
    ("+++ mod.py", "mod.py"),
], ids=["spaces", "old-side-with-b", "empty-old-side", "folder", "mnemonic-prefixes", "mnemonic-rename", "plain-spaces",
        "plain-timestamp", "plain-no-folder"])
def test_a_header_names_its_new_side_without_the_first_component(header: str, path: str) -> None:
    assert names_mode_change_of(f"{header}\n{MODE_CHANGE}", path)


def test_a_long_refused_line_is_shown_cut_to_a_hundred_characters() -> None:
    error = refusal(MOD_HEADER + "similarity index " + "9" * 200 + "\n")
    shown = error.message.rpartition(" (")[2].rstrip(")")
    assert shown.startswith("similarity index 999") and len(shown) == 100


def test_a_binary_line_names_its_file_even_without_a_folder() -> None:
    error = refusal("Binary files old.png and logo.png differ\n")
    assert says(error.message, "has a binary section for logo.png")


def test_a_binary_line_that_states_no_file_names_the_sections_path() -> None:
    error = refusal("diff --git a/pkg/data.bin b/pkg/data.bin\nBinary files differ\n")
    assert says(error.message, "has a binary section for pkg/data.bin")
