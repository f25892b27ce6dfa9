"""Tests of the CLI help: every command and every exit code is listed."""

from __future__ import annotations

import re

import pytest

from kvbake.cli import exit_code_table, main, parser
from kvbake.errors import EXIT_CODES, KvbakeError, UsageError
from usage_errors import usage_parts


@pytest.mark.parametrize("command", ["build", "plan", "lock", "verify", "dockerfile", "push", "rollback", "verify-running",
                                     "status", "config"])
def test_every_listed_command_parses(command: str) -> None:
    assert parser().parse_args([command]).command == command


def test_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError) as caught:
        parser().parse_args(["bake-everything"])
    assert caught.value.exit_code == 2
    assert "COMMAND" in caught.value.message and "'bake-everything'" in caught.value.message
    assert caught.value.fix.endswith("build.py --help")
    assert main(["bake-everything"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error (usage): argument COMMAND: invalid choice: 'bake-everything'") and err.count("\n") == 1, err


def test_an_unknown_option_of_a_command_names_that_command_s_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--dry-run"]) == 2
    cause, fix = usage_parts(capsys.readouterr().err)
    assert cause.endswith("--dry-run") and fix == "see python build.py --help"
    assert main(["verify", "--deep=yes"]) == 2
    assert "fix: see python build.py verify --help" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["build", "plan", "lock", "verify", "dockerfile", "push", "deploy", "rollback",
                                     "verify-running", "status", "config", "validate", "doctor", "base sync", "adopt"])
def test_help_lists_every_command(command: str) -> None:
    assert re.search(rf"^  {command}\b", parser().format_help(), re.MULTILINE)


@pytest.mark.parametrize("error", EXIT_CODES, ids=lambda cls: cls.__name__)
def test_help_lists_every_exit_code(error: type[KvbakeError]) -> None:
    assert re.search(rf"^  {error.exit_code} +{re.escape(error.title)}: ", parser().format_help(), re.MULTILINE)


def test_help_lists_success_and_usage_codes() -> None:
    text = parser().format_help()
    assert re.search(r"^  0 +success$", text, re.MULTILINE)
    assert re.search(r"^  2 +usage: ", text, re.MULTILINE)


def test_exit_codes_are_unique_and_the_table_is_in_order() -> None:
    codes = [cls.exit_code for cls in EXIT_CODES]
    assert len(set(codes)) == len(codes)
    assert 0 not in codes and UsageError.exit_code == 2
    listed = [int(line.split()[0]) for line in exit_code_table().splitlines()[1:]]
    assert listed == sorted([0, *codes])


def test_every_error_class_has_a_docstring_in_the_table() -> None:
    table = exit_code_table()
    for cls in EXIT_CODES:
        assert (cls.__doc__ or "").strip()
        if cls is not KvbakeError:
            assert cls.__doc__.strip() in table


def test_exit_1_is_a_bug_not_the_base_class_s_docstring() -> None:
    table = exit_code_table()
    assert "  1  error: an unexpected failure (a bug: please report it with --debug output)" in table.splitlines()
    assert KvbakeError.__doc__.strip() not in table
