"""Find anything that looks like a credential in text bound for labels, records, journals, node state or reports."""

# Name where, never echo it. Every writer either refuses such text (nothing is written) or, where the write must happen
# even then (a diverged mark, a validation report), writes a note of what was withheld in its place.

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from typing import Any, Iterator, Mapping

from kvbake.errors import IntegrityError

URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^/\s?#@]*)@")
TOKEN_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")),
    ("an Authorization header", re.compile(r"\bauthorization\s*[:=]\s*\S", re.IGNORECASE)),
    ("a Bearer token", re.compile(r"\b[Bb]earer\s+[A-Za-z0-9._~+/-]{16,}=*")),
    ("a GitHub token", re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("a GitLab token", re.compile(r"(?<![A-Za-z0-9_])glpat-[A-Za-z0-9_-]{20,}")),
    ("a Hugging Face token", re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}")),
    ("an AWS access key id", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])")),
    ("a password or token query pair", re.compile(
        r"(?:^|[?&;\s])(?:password|passwd|pwd|token|access_token|auth_token|api_key|apikey|secret|client_secret)=[^&\s]+",
        re.IGNORECASE)),
)
BASIC_AUTH = re.compile(r"\bBasic\s+([A-Za-z0-9+/]{8,}={0,2})")
USERNAME_SCHEMES = ("http", "https", "git", "ftp", "ftps")


def userinfo_kind(text: str) -> str | None:
    """'URL userinfo' when a URL carries a password, or any userinfo for http(s)/git (token-as-username)."""
    for match in URL_USERINFO.finditer(text):
        scheme, userinfo = match.group(1).lower(), match.group(2)
        if ":" in userinfo or (userinfo and scheme in USERNAME_SCHEMES):
            return "URL userinfo"
    return None


def _basic_auth(text: str) -> bool:
    for match in BASIC_AUTH.finditer(text):
        try:
            decoded = base64.b64decode(match.group(1), validate=True)
        except (binascii.Error, ValueError):
            continue
        if b":" in decoded:
            return True
    return False


def credential_kind(text: str) -> str | None:
    """What kind of credential `text` seems to hold (for a message), or None when it looks clean."""
    found = userinfo_kind(text)
    if found:
        return found
    for kind, pattern in TOKEN_PATTERNS:
        if pattern.search(text):
            return kind
    return "a Basic authorization value" if _basic_auth(text) else None


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every string inside `value` (mappings, lists, tuples, nested) with its dotted location; a key is placed by its parent."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(str(key), f"a key of {where or '(top level)'}")
            yield from _strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def find_credentials(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(location, kind) for every string in `values` that looks like a credential; the secret itself is not returned."""
    return [(where, kind) for where, text in _strings(values, "") if (kind := credential_kind(text))]


def refuse_credentials(values: Mapping[str, Any], what: str) -> None:
    """Raise IntegrityError naming each key of `values` (e.g. labels, a record) that holds a credential; never the value."""
    found = find_credentials(values)
    if found:
        places = ", ".join(f"{where} ({kind})" for where, kind in dict(found).items())
        raise IntegrityError(f"{what}: {places} looks like a credential and would be written in clear",
                             "remove it at its source (use a credential helper or git config, never a URL or a label)")


def refuse_in_option(option: str, text: str | None, written: str, fix: str) -> None:
    """Raise IntegrityError when the command-line value `text` of `option` looks like a credential; never echo it."""
    kind = credential_kind(text) if text else None
    if kind:
        raise IntegrityError(f"{option} holds {kind}, which would be written in clear into {written}", fix)


def withheld(kind: str) -> str:
    return f"(withheld: it looked like {kind})"


def withhold_credentials(value: Any) -> Any:
    """`value` (mappings, lists, tuples, dataclasses, nested) with every string that looks like a credential replaced,
    whole, by a note of its kind: for text kvbake must write even then and did not choose (a launcher's last line in a
    diverged mark, a serve's answer in a validation report)."""
    if isinstance(value, str):
        kind = credential_kind(value)
        return withheld(kind) if kind else value
    if isinstance(value, Mapping):
        return {withhold_credentials(key) if isinstance(key, str) else key: withhold_credentials(item) for key, item in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(withhold_credentials(item) for item in value))
    if isinstance(value, (list, tuple)):
        return type(value)(withhold_credentials(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: withhold_credentials(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value
