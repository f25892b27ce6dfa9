"""YAML documents read strictly: no duplicate key, schema errors with their path, rules on every string (no credential)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Hashable
from typing import Any, Iterator

import jsonschema
import yaml

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


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key given twice in one mapping."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, Hashable):
            raise yaml.constructor.ConstructorError(None, None, f"a {type(key).__name__} cannot be a mapping key", key_node.start_mark)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def parse_yaml(raw: bytes, name: str) -> Any:
    """Parse YAML strictly (no duplicate keys); a syntax error names the line."""
    try:
        return yaml.load(raw, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" line {where.line + 1}" if where else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ManifestError(f"{name}{line}: malformed YAML: {problem}", "fix the YAML syntax at that line") from None
    except RecursionError:
        raise ManifestError(f"{name}: YAML nested too deeply to read", "flatten the document to the schema's shape") from None
    except (ValueError, TypeError, OverflowError) as err:
        raise ManifestError(f"{name}: a YAML value cannot be read: {err}", "quote the value (a date or number YAML cannot represent)") from None


def describe_schema_error(err: jsonschema.ValidationError) -> str:
    """One readable phrase: the dotted path, what is wrong, and a suggestion when a key looks misspelt."""
    location = json_path(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        known = list(err.schema.get("properties", {}))
        extra = [k for k in err.instance if k not in known]
        return "; ".join(f"{location}: unknown key {k!r}{did_you_mean(k, known)}" for k in extra)
    if err.validator == "required":
        return f"{location}: missing key {err.message.split(' ')[0]}"
    return f"{location}: {err.message}"


def did_you_mean(word: Any, choices: list[str]) -> str:
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def json_path(parts: Any) -> str:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
    return text.lstrip(".") or "(top level)"
