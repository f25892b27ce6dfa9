"""The line of a serving container's log that says why it stopped: the root exception, not the wrappers around it."""

from __future__ import annotations

import re

TAIL_LINES = 300  # a vLLM start-up failure prints its root cause well above the last line
MAX_CHARS = 240
_PROCESS = re.compile(r"^\([^)]*\)\s+")  # "(EngineCore pid=24) "
_LOG_HEADER = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^\]]*\]\s?")
_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception)(?::\s|$)|Value error, )")
# Lines that only point at the real cause printed earlier.
_WRAPPERS = ("See root cause above", "See stack trace for root cause", "validation error for", "failed to start")


def message_of(line: str) -> str:
    """A log line without its process tag and logger header."""
    return _LOG_HEADER.sub("", _PROCESS.sub("", line.strip()))


def telling_line(log: str) -> str:
    """The first raised exception of the log's tail that is not a wrapper; else its last non-empty line; shortened."""
    lines = [message_of(line) for line in log.splitlines()[-TAIL_LINES:]]
    raised = [line for line in lines if _RAISED.match(line) and not any(w in line for w in _WRAPPERS)]
    found = raised[0] if raised else next((line for line in reversed(lines) if line), "no output")
    return found if len(found) <= MAX_CHARS else found[: MAX_CHARS - 1] + "…"
