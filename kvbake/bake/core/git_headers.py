"""Refuse the git headers that make `git apply` do more than edit text: links, modes, deletions, renames, binaries."""

# Copies too. unidiff keeps some of these as free text, so they are read here from a patch's raw lines.

from __future__ import annotations

import re

from kvbake.errors import PatchError

HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
NEW_FILE = re.compile(r"new file mode (\S*)")
INDEX_MODE = re.compile(r"index [0-9a-fA-F]+\.\.[0-9a-fA-F]+ (\S+)")
BINARY_FILES = re.compile(r"Binary files (?:.+ and )?(\S+) differ")
REGULAR = "100644"
INDEX_KEPT = ("100644", "100755")

MODE_FIX = "the chain may only edit text and create regular files (mode 100644); put the file's content in the patch, or drop the section"
MOVE_FIX = "renames and copies are not supported; create the new file with its full content and gate the old code instead"
REFUSED = (
    ("old mode ", "changes the mode of", MODE_FIX),
    ("new mode ", "changes the mode of", MODE_FIX),
    ("deleted file mode ", "deletes", "deleting base files is not supported; gate the code instead"),
    ("rename from ", "renames", MOVE_FIX),
    ("rename to ", "renames", MOVE_FIX),
    ("rename old ", "renames", MOVE_FIX),
    ("rename new ", "renames", MOVE_FIX),
    ("copy from ", "copies", MOVE_FIX),
    ("copy to ", "copies", MOVE_FIX),
    ("similarity index ", "renames or copies", MOVE_FIX),
    ("dissimilarity index ", "rewrites", "regenerate the patch without -B/-M/-C (plain git diff)"),
    ("GIT binary patch", "has a binary section for", "keep the chain to text changes"),
    ("Binary files ", "has a binary section for", "keep the chain to text changes"),
)


def refuse_special_headers(patch_id: str, text: str) -> None:
    """Raise PatchError for the first special header outside a hunk body, naming the patch, the path and the line."""
    path, started, old_left, new_left = "(unnamed file)", False, 0, 0
    for line in text.split("\n"):
        if old_left > 0 or new_left > 0:
            kind = line[:1]
            if kind in ("+", "-", " ", "", "\r", "\\"):
                old_left -= kind != "+" and kind != "\\"
                new_left -= kind != "-" and kind != "\\"
                continue
            old_left = new_left = 0
        if line.startswith(("diff --git ", "--- ", "+++ ")):
            started = True
            path = _section_path(line) or path
            continue
        hunk = HUNK.match(line)
        if hunk and started:
            old_left, new_left = (int(count) if count is not None else 1 for count in hunk.groups())
            continue
        if started or line.startswith("Binary files "):
            _check_line(patch_id, path, line)


def _check_line(patch_id: str, path: str, line: str) -> None:
    shown = " ".join(line.split())[:100]
    for prefix, verb, fix in REFUSED:
        if line.startswith(prefix):
            named = _binary_path(line) or path if prefix == "Binary files " else path
            raise PatchError(f"patch {patch_id} {verb} {named} ({shown})", fix)
    created = NEW_FILE.match(line)
    if created and created.group(1) != REGULAR:
        what = "as a symlink" if created.group(1) == "120000" else f"with mode {created.group(1)}"
        raise PatchError(f"patch {patch_id} creates {path} {what} ({shown})", MODE_FIX)
    indexed = INDEX_MODE.match(line)
    if indexed and indexed.group(1) not in INDEX_KEPT:
        raise PatchError(f"patch {patch_id} gives {path} the mode {indexed.group(1)} ({shown})", MODE_FIX)


def _section_path(line: str) -> str:
    """The new-side name a header line states, without its first component ('' when it states none)."""
    if line.startswith("diff --git "):
        rest = line[len("diff --git "):]
        cut = rest.rfind(" b/")
        name = rest[cut + 1:] if cut >= 0 else rest.rpartition(" ")[2]
    elif line.startswith("+++ "):
        name = line[4:].split("\t")[0]
    else:
        return ""
    return name.partition("/")[2] if "/" in name else name


def _binary_path(line: str) -> str:
    found = BINARY_FILES.match(line)
    if not found:
        return ""
    name = found.group(1)
    return name.partition("/")[2] if "/" in name else name
