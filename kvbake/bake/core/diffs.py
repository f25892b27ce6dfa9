"""Parse a unified diff (git or plain `diff -u`) into the files it edits; refuse anything but text edits inside the source root."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

import unidiff

from kvbake.bake.core.git_headers import refuse_special_headers
from kvbake.errors import PatchError
from kvbake.lock import CREATE, MODIFY  # the kinds of change a patch makes to a file, as the lock records them
DEV_NULL = "/dev/null"
KEPT_MODES = (None, "100644", "100755")
EPOCH_STAMP = re.compile(r"(1970-01-01|1969-12-31)[ T]")
UNUSUAL = re.compile(r"[\s\"\\\x00-\x1f\x7f\u0080-\u009f\u2028\u2029]")
NO_NEWLINE = "\\ No newline at end of file\n"
MARKER_LINE = re.compile(r"^\\ [^\n]*\n", re.MULTILINE)  # a line that opens with "\ ": only the no-newline marker does


@dataclass(frozen=True)
class FileChange:
    """One file a patch touches, relative to the source root."""

    path: str
    change: str
    added_lines: tuple[str, ...]


@dataclass(frozen=True)
class Section:
    """One file's section: what it changes, and its hunks rendered canonically (counts always stated, no section text)."""

    change: FileChange
    hunks: str


def parse_patch(patch_id: str, text: str) -> tuple[FileChange, ...]:
    """The files a patch touches, in the patch's order; every path is checked."""
    return tuple(section.change for section in parse_sections(patch_id, text))


def parse_sections(patch_id: str, text: str) -> tuple[Section, ...]:
    """Every file section of the patch, checked: special git headers are refused before unidiff reads the text.
    A last line without its newline is read as if it had one, as the normalized form states it."""
    text = text if text.endswith("\n") or not text else text + "\n"
    refuse_special_headers(patch_id, text)
    try:
        patch_set = unidiff.PatchSet(english_markers(text))
    except (unidiff.UnidiffParseError, ValueError, IndexError, TypeError) as err:
        reason = " ".join(str(err).split())[:120] or type(err).__name__
        raise PatchError(f"patch {patch_id} is not a unified diff: {reason}", "regenerate it with git diff, git format-patch or diff -u") from None
    if not patch_set:
        raise PatchError(f"patch {patch_id} touches no file", "remove it from the chain or regenerate it")
    sections = tuple(_section(patch_id, patched) for patched in patch_set)
    paths = [s.change.path for s in sections]
    for path in sorted({p for p in paths if paths.count(p) > 1}):
        raise PatchError(f"patch {patch_id} touches {path} in two sections", "regenerate the patch so each file appears once")
    return sections


def english_markers(text: str) -> str:
    """Every "\\ ..." line in git's English words: a diff made under another locale translates the no-newline marker,
    and unidiff reads only the English one at the end of a hunk (a translated one there would be dropped)."""
    return MARKER_LINE.sub(lambda _: NO_NEWLINE, text)


def normalized_patch(patch_id: str, text: str) -> str:
    """The patch as kvbake understood it, in plain git form (a/ b/ names, no message, index or mode lines, mode 100644
    for created files): the text that is applied and identified, so git can never act on something the parse did not see."""
    return "".join(render_section(s) for s in parse_sections(patch_id, text))


def render_section(section: Section) -> str:
    path = section.change.path
    head = f"diff --git a/{path} b/{path}\n"
    if section.change.change == CREATE:
        head += "new file mode 100644\n"
        return head + (f"--- {DEV_NULL}\n+++ b/{path}\n{section.hunks}" if section.hunks else "")
    return f"{head}--- a/{path}\n+++ b/{path}\n{section.hunks}"


def _section(patch_id: str, patched: unidiff.PatchedFile) -> Section:
    if patched.is_binary_file:
        raise PatchError(f"patch {patch_id} has a binary section for {patched.path}", "keep the chain to text changes")
    if patched.target_file == DEV_NULL:
        raise PatchError(f"patch {patch_id} deletes {patched.path}", "deleting base files is not supported; gate the code instead")
    path = relative_source_path(patch_id, patched.target_file)
    if patched.source_mode not in KEPT_MODES or patched.target_mode not in KEPT_MODES:
        raise PatchError(f"patch {patch_id} gives {path} the mode {patched.target_mode or patched.source_mode}",
                         "the chain may only edit or create regular files (mode 100644)")
    created = _is_creation(patched)
    if created and patched.target_mode not in (None, "100644"):
        raise PatchError(f"patch {patch_id} creates {path} with mode {patched.target_mode}", "the chain may only create regular files with mode 100644")
    if patched.source_file != DEV_NULL and _strip_first(patched.source_file) not in (path, f"{path}.orig"):
        raise PatchError(f"patch {patch_id} renames {patched.source_file} to {patched.target_file}",
                         "renames are not supported; name the same file on both sides (--- a/x, +++ b/x), or create and gate instead")
    if not patched and not created:
        raise PatchError(f"patch {patch_id} section for {path} has no hunk", "regenerate the patch")
    if any(line.is_removed or line.is_context for hunk in patched for line in hunk) and created:
        raise PatchError(f"patch {patch_id} creates {path} but its hunk has old lines", "regenerate the patch")
    added = tuple(line.value for hunk in patched for line in hunk if line.is_added)
    return Section(FileChange(path=path, change=CREATE if created else MODIFY, added_lines=added), "".join(_render_hunk(h) for h in patched))


def _is_creation(patched: unidiff.PatchedFile) -> bool:
    """/dev/null as the old side (git's `new file mode` sets it), or `diff -N`'s epoch timestamp on an empty old side."""
    if patched.source_file == DEV_NULL:
        return True
    empty_old = len(patched) == 1 and patched[0].source_start == 0 and patched[0].source_length == 0
    return empty_old and bool(EPOCH_STAMP.match(patched.source_timestamp or ""))


def _render_hunk(hunk: unidiff.Hunk) -> str:
    lines = "".join(_render_line(line) for line in hunk if line.line_type)
    return f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@\n{lines}"


def _render_line(line: unidiff.patch.Line) -> str:
    if line.line_type == "\\":
        return NO_NEWLINE
    value = line.value if line.value.endswith("\n") else line.value + "\n"
    return line.line_type + value


def _strip_first(name: str) -> str:
    """The name without its first component, as git apply -p1 reads it ('' when nothing is left)."""
    return name.partition("/")[2] if "/" in name else ""


def relative_source_path(patch_id: str, target: str) -> str:
    """Strip the first component (a/, b/, vllm.orig/…, like git apply -p1); refuse absolute, `..`, empty and unusual names."""
    fix = "make every name in the patch one leading folder plus the path inside the source root (a/pkg/x.py, b/pkg/x.py)"
    if UNUSUAL.search(target) or "//" in target:
        raise PatchError(f"patch {patch_id} names {target!r}: quoted names, whitespace, backslashes, doubled slashes and control characters are refused", fix)
    raw = _strip_first(target)
    pure = PurePosixPath(raw)
    if target.startswith("/") or pure.is_absolute() or ".." in pure.parts or str(pure) in ("", "."):
        raise PatchError(f"patch {patch_id} touches {target!r}, outside the source root", fix)
    return str(pure)
