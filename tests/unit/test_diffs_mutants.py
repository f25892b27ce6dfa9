"""Refusals only unidiff sees (they pass the git header check), a missing last newline, and how unusual sections are normalized."""

from __future__ import annotations

import pytest

from kvbake.bake.core.diffs import CREATE, MODIFY, FileChange, normalized_patch, parse_patch
from kvbake.errors import PatchError
from message_words import says

HG_BINARY = "Binary file pkg/data.bin has changed\n"
PLAIN_DELETION = "--- a/pkg/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-GONE = 1\n"
EPOCH_CREATION_EXECUTABLE = (
    "diff --git a/pkg/run.py b/pkg/run.py\nindex 0000000..1234567 100755\n"
    "--- a/pkg/run.py\t1970-01-01 00:00:00\n+++ b/pkg/run.py\n@@ -0,0 +1 @@\n+RUN = 1\n"
)
EMPTY_FILE_CREATION = "diff --git a/pkg/empty.py b/pkg/empty.py\nnew file mode 100644\nindex 0000000..e69de29\n"


def refusal(text: str) -> PatchError:
    with pytest.raises(PatchError) as caught:
        parse_patch("0007", text)
    assert caught.value.exit_code == 5
    return caught.value


def test_an_hg_style_binary_section_is_refused_naming_the_file() -> None:
    error = refusal(HG_BINARY)
    assert says(error.message, "patch 0007") and says(error.message, "binary section") and says(error.message, "pkg/data.bin")
    assert says(error.fix, "text changes")


def test_a_plain_diff_deleting_a_file_is_refused_naming_the_file() -> None:
    error = refusal(PLAIN_DELETION)
    assert says(error.message, "patch 0007") and says(error.message, "deletes") and says(error.message, "pkg/gone.py")
    assert says(error.fix, "gate the code")


def test_a_diff_n_creation_with_an_executable_mode_is_refused_naming_file_and_mode() -> None:
    error = refusal(EPOCH_CREATION_EXECUTABLE)
    assert says(error.message, "creates pkg/run.py") and says(error.message, "100755")
    assert says(error.fix, "mode 100644")


@pytest.mark.parametrize("body", ["-OLD = 1\n+NEW = 1\n", " OLD = 1\n+NEW = 1\n"], ids=["removed-line", "context-line"])
def test_a_creation_whose_hunk_has_old_lines_is_refused(body: str) -> None:
    old_count = "@@ -1 +1 @@" if body.startswith("-") else "@@ -1 +1,2 @@"
    error = refusal(f"--- /dev/null\n+++ b/pkg/new.py\n{old_count}\n{body}")
    assert says(error.message, "creates pkg/new.py") and says(error.message, "old lines")
    assert says(error.fix, "regenerate the patch")


def test_an_empty_file_creation_normalizes_to_its_header_alone() -> None:
    assert parse_patch("0001", EMPTY_FILE_CREATION) == (FileChange("pkg/empty.py", CREATE, ()),)
    assert normalized_patch("0001", EMPTY_FILE_CREATION) == "diff --git a/pkg/empty.py b/pkg/empty.py\nnew file mode 100644\n"


def test_a_translated_no_newline_marker_inside_a_hunk_is_normalized_to_the_english_one() -> None:
    text = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-OLD = 1\n\\ Kein Zeilenumbruch am Dateiende\n+NEW = 1\n"
    normalized = normalized_patch("0001", text)
    assert normalized.endswith("@@ -1,1 +1,1 @@\n-OLD = 1\n\\ No newline at end of file\n+NEW = 1\n")
    assert "Kein" not in normalized


def test_a_last_line_without_its_newline_is_read_as_if_it_had_one() -> None:
    text = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-VALUE = 1\n+VALUE = 2"
    assert parse_patch("0001", text) == (FileChange("pkg/mod.py", MODIFY, ("VALUE = 2\n",)),)
    assert normalized_patch("0001", text).endswith("@@ -1,1 +1,1 @@\n-VALUE = 1\n+VALUE = 2\n")


def test_a_hunk_one_context_line_short_is_not_completed_by_the_final_newline() -> None:
    error = refusal("--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,2 +1,2 @@\n-VALUE = 1\n+VALUE = 2\n")
    assert says(error.message, "not a unified diff") and says(error.message, "Hunk is shorter than expected")


def test_the_reason_unidiff_gives_is_cut_to_120_characters() -> None:
    error = refusal("--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-VALUE = 1\n*" + "x" * 200 + "\n")
    reason = error.message.partition("not a unified diff: ")[2]
    assert reason.startswith("Hunk diff line expected: *xxx") and len(reason) == 120


def test_a_translated_no_newline_marker_at_the_end_of_a_hunk_keeps_the_last_line_without_its_newline() -> None:
    body = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-OLD = 1\n+NEW = 1\n"
    translated = normalized_patch("0001", body + "\\ Kein Zeilenumbruch am Dateiende\n")
    assert translated == normalized_patch("0001", body + "\\ No newline at end of file\n")
    assert translated.endswith("+NEW = 1\n\\ No newline at end of file\n")
