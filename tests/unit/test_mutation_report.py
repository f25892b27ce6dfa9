"""The mutation report's prose-only class: a reworded sentence only, never a string that code reads."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.append(str(ROOT / "scripts"))

from mutation_report import prose_only  # noqa: E402


def diff(before: str, after: str) -> str:
    return f"--- a.py\n+++ a.py\n@@ -1,1 +1,1 @@\n-{before}\n+{after}\n"


LINE = '        raise SignatureError(f"{key} not found", "give --key the cosign.key that keys wrote")'


@pytest.mark.parametrize("after", [
    LINE.replace('"give --key the cosign.key that keys wrote"', '"XXgive --key the cosign.key that keys wroteXX"'),
    LINE.replace('"give --key the cosign.key that keys wrote"', '"GIVE --KEY THE COSIGN.KEY THAT KEYS WROTE"'),
    "    help='the node to read from'".replace("the node to read from", "THE NODE TO READ FROM"),
])
def test_a_reworded_sentence_is_prose_only(after: str) -> None:
    before = LINE if after.startswith("        raise") else "    help='the node to read from'"
    assert prose_only(diff(before, after))


@pytest.mark.parametrize(("before", "after"), [
    (LINE, LINE.replace('"give --key the cosign.key that keys wrote"', "None")),          # the fix is dropped
    (LINE, LINE.replace('"give --key the cosign.key that keys wrote"', '"give --key"')),  # not a case or XX change
    ('    digest = image.partition("@")[2]', '    digest = image.partition("XX@XX")[2]'),  # a separator code reads
    ('    found["signed by"] = key', '    found["XXsigned byXX"] = key'),                  # one space: a key, not prose
    ('    x = f("a b c", 1)', '    x = f("A B C", 2)'),                                   # something else changed too
])
def test_anything_else_is_not(before: str, after: str) -> None:
    assert not prose_only(diff(before, after))


def test_a_mutant_of_two_lines_is_not_prose_only() -> None:
    two = "--- a.py\n+++ a.py\n@@\n-x = 'a b c'\n-y = 1\n+x = 'A B C'\n+y = 2\n"
    assert not prose_only(two)


NESTED = """    lines = [f"served: {f.path} ({'image ' + f.base if f.base else 'not in the image'})" for f in files]"""


@pytest.mark.parametrize("after", [
    NESTED.replace("'not in the image'", "'XXnot in the imageXX'"),
    NESTED.replace("'not in the image'", "'NOT IN THE IMAGE'"),
])
def test_a_reworded_sentence_nested_in_an_f_string_is_prose_only(after: str) -> None:
    assert prose_only(diff(NESTED, after))


@pytest.mark.parametrize("after", [
    NESTED.replace("'image '", "'XXimage XX'"),
    NESTED.replace("'not in the image'", "'XXnot in the imageXX'").replace("'image '", "'IMAGE '"),
    NESTED.replace("'not in the image'", "None"),
])
def test_a_nested_word_or_two_nested_changes_or_a_dropped_sentence_are_not(after: str) -> None:
    assert not prose_only(diff(NESTED, after))
