"""The manifest's text with base.image pointed at the new base, comments and layout kept, and its diff for review."""

from __future__ import annotations

import difflib
import re

import yaml

from kvbake.errors import RebaseError


def with_base_image(text: str, old: str, new: str) -> str:
    """`text` with the one `image:` line that gives `old` now giving `new`; the result must parse to base.image == new."""
    pattern = re.compile(rf"^(?P<key>[ \t]+image:[ \t]*)(?P<quote>['\"]?){re.escape(old)}(?P=quote)(?P<rest>[ \t]*(#.*)?)$", re.MULTILINE)
    found = pattern.findall(text)
    if len(found) != 1:
        raise RebaseError(f"the manifest gives base.image {old} on {len(found)} lines, not on one",
                          f"set base.image to the new base yourself, then run python build.py lock --rebase-base")
    edited = pattern.sub(lambda m: f"{m.group('key')}{m.group('quote')}{new}{m.group('quote')}{m.group('rest')}", text)
    if (yaml.safe_load(edited).get("base") or {}).get("image") != new:
        raise RebaseError(f"pointing base.image at {new} did not give a manifest whose base is {new}",
                          "set base.image to the new base yourself, then run python build.py lock --rebase-base")
    return edited


def text_diff(name: str, before: str, after: str) -> str:
    """A unified diff of a file's text, for people."""
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{name}", f"b/{name}"))
