"""vLLM's serve options: the packaged table (each spelling's canonical long name and arity), and which option a token names."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from kvbake.errors import IntegrityError

TABLE_PATH = "data/vllm_serve_options.json"
# How many values an option takes: none, exactly one, one or more, one if a value follows, any number.
FLAG, VALUE, ONE_OR_MORE, OPTIONAL, ANY = "flag", "value", "one-or-more", "optional", "any"
ARITIES = (FLAG, VALUE, ONE_OR_MORE, OPTIONAL, ANY)
NEGATIVE_NUMBER = re.compile(r"-([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?")

# An option under its canonical name, with the values it was given.
Entry = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class OptionSpec:
    """One spelling of a vLLM option: the long name every spelling with its effect shares, and its arity."""

    canonical: str
    arity: str


@dataclass(frozen=True)
class OptionTable:
    """Every spelling vLLM's serve parser accepts, and the vLLM versions whose recordings the table joins."""

    options: Mapping[str, OptionSpec]
    versions: tuple[str, ...]

    def spec(self, spelling: str) -> OptionSpec | None:
        return self.options.get(spelling)


def _malformed(why: str) -> IntegrityError:
    return IntegrityError(f"the packaged table of vLLM's options ({TABLE_PATH}) is malformed: {why}",
                          "reinstall kvbake, or regenerate the table with python scripts/vllm_options_table.py")


def _spec(spelling: Any, row: Any) -> OptionSpec:
    if not isinstance(spelling, str) or not spelling.startswith("-"):
        raise _malformed(f"{spelling!r} is not an option spelling")
    if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], str) and row[0].startswith("--")):
        raise _malformed(f"{spelling} is not [canonical long name, arity]")
    if row[1] not in ARITIES:
        raise _malformed(f"{spelling} has arity {row[1]!r}, not one of {', '.join(ARITIES)}")
    return OptionSpec(row[0], row[1])


def table_from_document(document: Any) -> OptionTable:
    """The table from its JSON document; every canonical name must itself be a spelling of the same arity."""
    if not isinstance(document, dict) or document.get("format") != 1 or not isinstance(document.get("options"), dict):
        raise _malformed("not a format-1 document with options")
    options = {spelling: _spec(spelling, row) for spelling, row in document["options"].items()}
    for spelling, spec in options.items():
        if options.get(spec.canonical) != OptionSpec(spec.canonical, spec.arity):
            raise _malformed(f"{spelling}'s canonical name {spec.canonical} is not a spelling of arity {spec.arity}")
    versions = document.get("recordings")
    if not isinstance(versions, list) or not all(isinstance(version, str) for version in versions):
        raise _malformed("recordings is not a list of vLLM versions")
    return OptionTable(MappingProxyType(options), tuple(versions))


@functools.cache
def serve_options() -> OptionTable:
    """The packaged table, read once."""
    text = resources.files("kvbake").joinpath(TABLE_PATH).read_text(encoding="utf-8")
    try:
        document = json.loads(text)
    except ValueError as err:
        raise _malformed(f"not JSON ({err})") from err
    return table_from_document(document)


# ---- which option a token names ----

@dataclass(frozen=True)
class OptionToken:
    """One option token: its canonical name (the table's, else the spelling normalised), arity (None when the table
    does not know it) and the value given after `=` in the same token."""

    name: str
    arity: str | None
    inline: str | None


def _normalised(token: str) -> tuple[str, str | None]:
    """The option a token names, spelt as vLLM reads it (`--a_b` is `--a-b`; a dotted key keeps its own spelling),
    and its `=` value."""
    name, equals, inline = token.partition("=")
    if name.startswith("--") and len(name) > 2:
        head, dot, key = name[2:].partition(".")
        name = "--" + head.replace("_", "-") + dot + key
    return name, inline if equals else None


def read_option(token: str, table: OptionTable) -> OptionToken:
    """The option a token names: a spelling of the table, a dotted key of a value option (`--<option>.<key>`), a
    one-letter short option with its value attached (`-n2`), or an option the table does not know."""
    name, inline = _normalised(token)
    spec = table.spec(name)
    if spec:
        return OptionToken(spec.canonical, spec.arity, inline)
    head, dot, key = name.partition(".")
    group = table.spec(head) if name.startswith("--") and dot and key else None
    if group and group.arity == VALUE:
        return OptionToken(f"{group.canonical}.{key}", VALUE, inline)
    attached = table.spec(token[:2]) if not token.startswith("--") and len(token) > 2 else None
    if attached and attached.arity == VALUE:
        return OptionToken(attached.canonical, VALUE, token[2:])
    return OptionToken(name, None, inline)


def is_option_token(token: str, table: OptionTable) -> bool:
    """Whether a token is an option (or `--`) rather than a value: negative numbers and `-` are values, and so is a
    token with a space that names no known option."""
    if not token.startswith("-") or token == "-" or NEGATIVE_NUMBER.fullmatch(token):
        return False
    return " " not in token or read_option(token, table).arity is not None


def canonical_name(name: str, table: OptionTable | None = None) -> str:
    """An option's canonical name from any spelling (`-tp`, `--max_model_len`); unknown names normalised."""
    return read_option(name, table or serve_options()).name


def render_entries(entries: Iterable[Entry], table: OptionTable | None = None) -> list[str]:
    """Entries as tokens, so that they parse back to the same entries: a single value that looks like an option is
    joined with `=`, and so is the value of an unknown option spelt only with dashes (`--=x`)."""
    table = table or serve_options()
    tokens: list[str] = []
    for name, values in entries:
        joined = len(values) == 1 and (is_option_token(values[0], table) or name in ("-", "--"))
        tokens += [f"{name}={values[0]}"] if joined else [name, *values]
    return tokens
