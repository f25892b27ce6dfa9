"""What the interpreter runs after its own options: `--` ends them (and with nothing after it, nothing runs), a long
option takes its separate argument, and standard input or a long option such as --version runs no script."""

from __future__ import annotations

import pytest

from kvbake.serve.core.python_argv import interpreter_target


@pytest.mark.parametrize(("argv", "target"), [
    (("python3", "--"), None),
    (("python3", "--", "s.py"), (2, None)),
    (("python3", "-u", "--", "s.py", "x"), (3, None)),
    (("python3", "--check-hash-based-pycs", "always", "s.py"), (3, None)),
    (("python3", "--check-hash-based-pycs", "always", "-m", "vllm"), (5, "vllm")),
    (("python3", "-"), None),
    (("python3", "-", "s.py"), None),
    (("python3", "--version"), None),
    (("python3", "--help", "s.py"), None),
])
def test_the_end_of_the_interpreters_options(argv, target):
    assert interpreter_target(argv) == target
