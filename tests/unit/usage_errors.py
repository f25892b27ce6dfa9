"""Split the CLI's one-line usage error into its cause and its fix, checking the line's shape on the way."""

from __future__ import annotations

PREFIX = "error (usage): "


def usage_parts(stderr: str) -> tuple[str, str]:
    """(cause, fix) of exactly one `error (usage): CAUSE; fix: FIX` line."""
    assert stderr.startswith(PREFIX) and stderr.endswith("\n") and stderr.count("\n") == 1, stderr
    cause, separator, fix = stderr[len(PREFIX):-1].partition("; fix: ")
    assert separator, stderr
    return cause, fix
