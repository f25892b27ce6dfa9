"""Strict reading of the lock's JSON document: every field's type is checked, every complaint names the field's path."""

from __future__ import annotations

import json
import math
from pathlib import Path, PurePosixPath
from typing import Any

from kvbake.errors import LockError

MALFORMED_FIX = "restore it from version control, or delete it and run python build.py lock"
MAX_SHOWN = 40


def kind_of(value: Any) -> str:
    """A reader's word for a JSON value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {str: "a string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def shown(text: str) -> str:
    """A name from the document, quoted and cut short, safe to put in a one-line message."""
    return repr(text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "…")


class Fields:
    """One JSON object of a lock document, read field by field."""

    def __init__(self, source: str, value: Any, where: str, keys: tuple[str, ...]) -> None:
        self.source, self.where = source, where
        if not isinstance(value, dict):
            raise self.malformed(where, f"must be an object, not {kind_of(value)}")
        missing = [k for k in keys if k not in value]
        if missing:
            raise self.malformed(where, f"lacks the key {shown(missing[0])}")
        unknown = sorted((str(k) for k in value if k not in keys))
        if unknown:
            raise self.malformed(where, f"has the unknown key {shown(unknown[0])}")
        self.value = value

    def malformed(self, where: str, problem: str) -> LockError:
        return LockError(f"{self.source} is malformed: {where or 'the top level'} {problem}", MALFORMED_FIX)

    def path_of(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def text(self, key: str, optional: bool = False) -> str | None:
        return self.check_text(self.value[key], self.path_of(key), optional)

    def check_text(self, value: Any, where: str, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise self.malformed(where, f"must be a string{' or null' if optional else ''}, not {kind_of(value)}")
        if not encodable(value):
            raise self.malformed(where, "is not valid Unicode text")
        return value

    def number(self, key: str, maximum: int | None = None) -> int:
        return self.check_number(self.value[key], self.path_of(key), maximum)

    def check_number(self, value: Any, where: str, maximum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (maximum is not None and value > maximum):
            bound = f" and ≤ {maximum}" if maximum is not None else ""
            raise self.malformed(where, f"must be a whole number ≥ 0{bound}, not {kind_of(value)} {shown(str(value))}")
        return value

    def relative(self, key: str) -> str:
        return self.check_relative(self.value[key], self.path_of(key))

    def check_relative(self, value: Any, where: str) -> str:
        text = self.check_text(value, where)
        pure = PurePosixPath(text)
        if not text or pure.is_absolute() or ".." in pure.parts or "\\" in text or "\0" in text:
            raise self.malformed(where, f"must be a relative path without '..', not {shown(text)}")
        return text

    def items(self, key: str) -> list[tuple[str, Any]]:
        """The list under `key`, each item with its path."""
        value, where = self.value[key], self.path_of(key)
        if not isinstance(value, (list, tuple)):
            raise self.malformed(where, f"must be a list, not {kind_of(value)}")
        return [(f"{where}[{index}]", item) for index, item in enumerate(value)]

    def texts(self, key: str, relative: bool = False) -> tuple[str, ...]:
        check = self.check_relative if relative else self.check_text
        return tuple(check(item, where) for where, item in self.items(key))

    def child(self, key: str, keys: tuple[str, ...]) -> "Fields":
        return Fields(self.source, self.value[key], self.path_of(key), keys)

    def plain_object(self, key: str) -> dict:
        """A free-form JSON object (such as the base's raw config): string keys, finite numbers, valid text only."""
        value = self.value[key]
        if not isinstance(value, dict):
            raise self.malformed(self.path_of(key), f"must be an object, not {kind_of(value)}")
        problem = first_non_json(value)
        if problem:
            raise self.malformed(self.path_of(key), problem)
        return dict(value)


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def first_non_json(value: Any) -> str | None:
    """What keeps `value` from writing back as the same JSON, or None (walked without recursion)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if any(not isinstance(k, str) or not encodable(k) for k in item):
                return "holds a key that is not valid text"
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return "holds a number that is not finite"
        elif isinstance(item, str) and not encodable(item):
            return "holds a string that is not valid Unicode text"
        elif item is not None and not isinstance(item, (str, int, float, bool)):
            return f"holds {kind_of(item)}, which JSON cannot carry"
    return None


def parse_document(name: str, data: bytes) -> dict[str, Any]:
    """The top-level object of a lock file's bytes; empty, non-UTF-8, non-JSON or non-object bytes are a LockError."""
    if not data.strip():
        raise LockError(f"{name} is empty (an interrupted copy or a truncated file)", MALFORMED_FIX)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise LockError(f"{name} is malformed: not UTF-8 text (byte {err.start})", MALFORMED_FIX) from None
    try:
        document = json.loads(text, object_pairs_hook=unique_keys, parse_constant=no_constant)
    except RecursionError:
        raise LockError(f"{name} is malformed: nested too deeply", MALFORMED_FIX) from None
    except ValueError as err:
        raise LockError(f"{name} is malformed: not JSON ({err})", MALFORMED_FIX) from None
    if not isinstance(document, dict):
        raise LockError(f"{name} is malformed: the top level must be an object, not {kind_of(document)}", MALFORMED_FIX)
    return document


def read_document(path: Path) -> dict[str, Any]:
    """The top-level object of the lock file at `path`; an unreadable file is a LockError too."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise LockError(f"{path.name} cannot be read ({err.strerror or type(err).__name__})",
                        "make it a readable file, or delete it and run python build.py lock") from None
    return parse_document(path.name, data)


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"the key {shown(key)} appears twice in one object")
        seen.add(key)
    return dict(pairs)


def no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
