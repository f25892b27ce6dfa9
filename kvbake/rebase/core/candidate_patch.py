"""A refreshed patch: the original header kept, a new diff body; and the conflict markers left for a person."""

from __future__ import annotations

import re

# The candidate folder: patches/ as the chain names them, report.md, report.json, report.html, and
RECORD = "rebase.json"  # what the candidate was made from: --accept checks it
RESOLVE = "resolve"  # resolve/<patch id>/<path>: a conflicted patch's files after it, markers and all, for a person to edit
BEFORE = ".before"  # resolve/<patch id>/.before/<path>: the same files before the patch, on the new base
MARKER = re.compile(r"^[+ -]?(<{7} |={7}$|>{7} |\|{7} )", re.MULTILINE)


def patch_header(text: str) -> str:
    """Everything before the first file section: a `diff --git` line, or a plain diff's `---` line followed by `+++`."""
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.startswith("diff --git "):
            return "".join(lines[:index])
        if line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ "):
            return "".join(lines[:index])
    return ""


def refreshed_patch(original: str, body: str) -> str:
    """The original header over the new body (the body as git diff writes it, sections in the patch's order)."""
    return patch_header(original) + body


def conflict_marker_lines(text: str) -> list[int]:
    """1-based numbers of the lines that hold a merge conflict marker (in a file, or on a patch line's side)."""
    starts = {match.start() for match in MARKER.finditer(text)}
    numbers, offset = [], 0
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        if offset in starts:
            numbers.append(number)
        offset += len(line)
    return numbers
