"""A Python interpreter's command line: is argv[0] an interpreter, and which script or module does it run."""

from __future__ import annotations

import posixpath
import re
from typing import Sequence

INTERPRETER = re.compile(r"python[0-9]*(\.[0-9]+)*")
# The interpreter's one-letter options without an argument (they combine: `-OO`, `-uB`), and those that take one,
# attached (`-Xdev`, `-X=dev`, `-Wignore`) or as the next token (`-X dev`, `-m module`).
FLAGS = frozenset("bBdEiIOPqRsSuvx")
WITH_ARGUMENT = frozenset("cmWX")
LONG_WITH_ARGUMENT = ("--check-hash-based-pycs",)


def is_interpreter(program: str) -> bool:
    """`python`, `python3`, `python3.12`, with or without a folder."""
    return bool(INTERPRETER.fullmatch(posixpath.basename(program)))


def _letters(letters: str, following: str | None) -> tuple[int, str | None] | None:
    """One token of one-letter options (without its dash): how many tokens it spans and the module `-m` names; None
    for an option after which the interpreter runs no file or module (`-c`, `-V`, `-h`)."""
    for at, letter in enumerate(letters):
        if letter in FLAGS:
            continue
        attached = letters[at + 1:]
        argument = attached or following
        if letter not in WITH_ARGUMENT or letter == "c" or argument is None:
            return None
        return (1 if attached else 2), (argument if letter == "m" else None)
    return 1, None


def interpreter_target(argv: Sequence[str]) -> tuple[int, str | None] | None:
    """After the interpreter's own options: (the script's index, None), or (the index of the module's first argument,
    the module) for `-m`; None when the interpreter runs neither (`-c`, standard input, `--version`)."""
    at = 1
    while at < len(argv):
        token = argv[at]
        if token == "--":
            return (at + 1, None) if at + 1 < len(argv) else None
        if token in LONG_WITH_ARGUMENT:
            at += 2
            continue
        if token == "-" or token.startswith("--"):
            return None
        if not token.startswith("-"):
            return at, None
        step = _letters(token[1:], argv[at + 1] if at + 1 < len(argv) else None)
        if step is None:
            return None
        if step[1] is not None:
            return at + step[0], step[1]
        at += step[0]
    return None
