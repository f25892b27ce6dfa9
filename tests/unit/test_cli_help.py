"""Tests of the CLI help: every command and every exit code is listed."""

from __future__ import annotations

import re

import pytest

from kvbake.cli import exit_code_table, parser
from kvbake.errors import EXIT_CODES, KvbakeError


@pytest.mark.parametrize("command", ["build", "plan", "lock", "verify", "dockerfile", "push", "rollback", "verify-running",
                                     "status", "config"])
def test_every_listed_command_parses(command: str) -> None:
    assert parser().parse_args([command]).command == command


def test_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parser().parse_args(["bake-everything"])
    assert caught.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["build", "plan", "lock", "verify", "dockerfile", "push", "deploy", "rollback",
                                     "verify-running", "status", "config", "validate"])
def test_help_lists_every_command(command: str) -> None:
    assert re.search(rf"^  {command}\b", parser().format_help(), re.MULTILINE)


@pytest.mark.parametrize("error", EXIT_CODES, ids=lambda cls: cls.__name__)
def test_help_lists_every_exit_code(error: type[KvbakeError]) -> None:
    assert re.search(rf"^  {error.exit_code} +{re.escape(error.title)}: ", parser().format_help(), re.MULTILINE)


def test_help_lists_success_and_usage_codes() -> None:
    text = parser().format_help()
    assert re.search(r"^  0 +success$", text, re.MULTILINE)
    assert re.search(r"^  2 +usage error", text, re.MULTILINE)


def test_exit_codes_are_unique_and_the_table_is_in_order() -> None:
    codes = [cls.exit_code for cls in EXIT_CODES]
    assert len(set(codes)) == len(codes)
    assert 0 not in codes and 2 not in codes
    listed = [int(line.split()[0]) for line in exit_code_table().splitlines()[1:]]
    assert listed == sorted([0, 2, *codes])


def test_every_error_class_has_a_docstring_in_the_table() -> None:
    table = exit_code_table()
    for cls in EXIT_CODES:
        assert (cls.__doc__ or "").strip()
        assert cls.__doc__.strip() in table
