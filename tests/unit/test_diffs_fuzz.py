"""Property tests of parse_patch: whatever the text, a value or a one-line PatchError, never another exception."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbake.bake.core.diffs import FileChange, normalized_patch, parse_patch
from kvbake.errors import PatchError

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)

VALID = (
    "diff --git a/pkg/mod.py b/pkg/mod.py\nindex 1111111..2222222 100644\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
    "@@ -1,3 +1,4 @@\n import os\n+import sys\n \n VALUE = 1\n"
    "diff --git a/pkg/new.py b/pkg/new.py\nnew file mode 100644\nindex 0000000..3333333\n--- /dev/null\n+++ b/pkg/new.py\n"
    "@@ -0,0 +1,2 @@\n+def helper():\n+    return 1\n",
    "--- vllm.orig/pkg/mod.py\t2024-05-01 10:00:00 +0000\n+++ vllm/pkg/mod.py\t2024-05-02 10:00:00 +0000\n"
    "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n",
    "diff --git a/pkg/link.py b/pkg/link.py\nnew file mode 120000\n--- /dev/null\n+++ b/pkg/link.py\n@@ -0,0 +1 @@\n+/etc/passwd\n",
    "diff --git a/pkg/old.py b/pkg/new.py\nsimilarity index 90%\nrename from pkg/old.py\nrename to pkg/new.py\n",
    "diff --git a/pkg/data.bin b/pkg/data.bin\nGIT binary patch\nliteral 3\nKcmZ?wdI11}0RR91\n\n",
)
HEADER_WORDS = (
    "diff --git a/pkg/x.py b/pkg/x.py", "--- a/pkg/x.py", "+++ b/pkg/x.py", "--- /dev/null", "+++ /dev/null", "@@ -1 +1 @@",
    "@@ -0,0 +1,2 @@", "@@ -1,3 +1,0 @@", "new file mode 100644", "new file mode 120000", "deleted file mode 100644",
    "old mode 100644", "new mode 100755", "index 1111111..2222222 100644", "index 1111111..2222222 160000", "rename from pkg/a.py",
    "copy to pkg/b.py", "similarity index 50%", "GIT binary patch", "literal 0", "Binary files a/x and b/x differ",
    "\\ No newline at end of file", "+added", "-removed", " context", "", "\r", "diff -u a/x b/x", '--- "a/q\\tx"', "+++ b/../x",
)


def outcome(text: str) -> tuple[FileChange, ...] | PatchError:
    """parse_patch's value, or its PatchError; any other exception fails the test."""
    try:
        value = parse_patch("0001", text)
    except PatchError as err:
        return err
    assert isinstance(value, tuple) and value and all(isinstance(change, FileChange) for change in value)
    return value


def assert_value_or_one_line_error(text: str) -> None:
    result = outcome(text)
    if isinstance(result, PatchError):
        line = str(result)
        assert line == result.one_line() and line.startswith("patch 0001 ")
        assert len(line.splitlines()) == 1 and result.exit_code == 5
    else:
        normalized = normalized_patch("0001", text)
        assert parse_patch("0001", normalized) == result
        assert normalized_patch("0001", normalized) == normalized


@st.composite
def mutated(draw: st.DrawFn) -> str:
    lines = draw(st.sampled_from(VALID)).split("\n")
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, len(lines)))
        action = draw(st.sampled_from(("drop", "copy", "insert", "edit", "swap")))
        if action == "insert" or not lines:
            lines.insert(where, draw(st.sampled_from(HEADER_WORDS) | st.text(max_size=12)))
            continue
        index = min(where, len(lines) - 1)
        if action == "drop":
            del lines[index]
        elif action == "copy":
            lines.insert(index, lines[index])
        elif action == "edit":
            line = lines[index]
            cut = draw(st.integers(0, len(line)))
            lines[index] = line[:cut] + draw(st.text(max_size=3)) + line[cut + 1:]
        else:
            other = draw(st.integers(0, len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
    return "\n".join(lines)


@given(st.text(max_size=300))
@SETTINGS
def test_random_text(text: str) -> None:
    assert_value_or_one_line_error(text)


@given(mutated())
@SETTINGS
def test_mutated_valid_patches(text: str) -> None:
    assert_value_or_one_line_error(text)


@given(st.lists(st.sampled_from(HEADER_WORDS), min_size=1, max_size=12).flatmap(st.permutations))
@SETTINGS
def test_shuffled_header_lines(lines: list[str]) -> None:
    assert_value_or_one_line_error("\n".join(lines) + "\n")


@given(st.binary(max_size=300), st.sampled_from(("latin-1", "utf-8", "utf-16")))
@SETTINGS
def test_binary_bytes_decoded(data: bytes, encoding: str) -> None:
    assert_value_or_one_line_error(data.decode(encoding, "replace"))


@given(st.sampled_from(VALID), st.binary(min_size=1, max_size=40), st.integers(0, 400))
@SETTINGS
def test_binary_bytes_spliced_into_a_valid_patch(text: str, data: bytes, where: int) -> None:
    assert_value_or_one_line_error(text[:where] + data.decode("latin-1") + text[where:])
