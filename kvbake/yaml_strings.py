"""Rules on every string of a loaded YAML document: no credential, no URL userinfo, no control character, bounded depth."""

from __future__ import annotations

import re
from typing import Any, Iterator

from kvbake.errors import ManifestError
from kvbake.secretscan import URL_USERINFO, credential_kind

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
PROSE_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
PROSE_FIELDS = (("description",),)
MAX_DEPTH = 32
CREDENTIAL_FIX = ("remove it from the file; give the donor's credentials to git through a credential helper "
                  "or git config (url.<base>.insteadOf), never in a URL of the manifest")


class KeyOf:
    """Marks a path that points at a mapping's key: it is named by its parent, so a secret key is never echoed."""


def field_name(parts: tuple[Any, ...]) -> str:
    """The dotted path of a value, as schema messages write it (donor.url, chain[0].file); control characters escaped."""
    if parts and parts[-1] is KeyOf:
        return f"a key of {field_name(parts[:-1])}"
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text).lstrip(".") or "(top level)"


def document_strings(value: Any, parts: tuple[Any, ...], name: str, seen: tuple[int, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Every string (keys included) with its path; a recursive alias or a too deep nesting is a ManifestError."""
    if isinstance(value, str):
        yield parts, value
        return
    if not isinstance(value, (dict, list)):
        return
    if id(value) in seen:
        raise ManifestError(f"{name}: {field_name(parts)} refers to itself through a YAML alias",
                            "write the value out instead of a recursive alias")
    if len(parts) > MAX_DEPTH:
        raise ManifestError(f"{name}: {field_name(parts[:MAX_DEPTH])} is nested more than {MAX_DEPTH} levels deep",
                            "flatten the document to the schema's shape")
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        inner = (*parts, key if isinstance(key, (str, int)) else str(key))
        if isinstance(key, str):
            yield (*parts, KeyOf), key
        yield from document_strings(item, inner, name, (*seen, id(value)))


def control_character(text: str, prose: bool = False) -> str | None:
    """The first control character of `text` as U+XXXX (prose may hold newlines and tabs), or None."""
    match = (PROSE_CONTROL if prose else CONTROL).search(text)
    return f"U+{ord(match.group()):04X}" if match else None


def check_strings(document: Any, name: str, prose_fields: tuple[tuple[str, ...], ...] = PROSE_FIELDS,
                  any_userinfo: bool = True, credential_fix: str = CREDENTIAL_FIX) -> None:
    """Refuse a credential (any URL userinfo unless `any_userinfo` is off) and a control character outside the prose fields."""
    strings = list(document_strings(document, (), name))
    for parts, text in strings:
        kind = "URL userinfo (user:token@)" if any_userinfo and URL_USERINFO.search(text) else credential_kind(text)
        if kind:
            raise ManifestError(f"{name}: {field_name(parts)} holds {kind}, "
                                "which would be copied in clear into locks, labels or records", credential_fix)
    problems = [f"{field_name(parts)} contains control character {char}" for parts, text in strings
                if (char := control_character(text, prose=parts in prose_fields))]
    if problems:
        raise ManifestError(f"{name}: {'; '.join(problems)}",
                            "remove control characters (newlines, tabs, escapes) from those values; "
                            "they end up in env files, labels and launcher arguments")
