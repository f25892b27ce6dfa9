"""kvbake.cli edges: --debug reaches the root logger, the before-command copies are dropped, the help's exit-code heading."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kvbake import cli

from test_cli_main_flow import plan_runs  # noqa: F401 (a fixture)


def bare_root_logger(monkeypatch: pytest.MonkeyPatch) -> logging.Logger:
    """The root logger without handlers, pytest's own included (so basicConfig acts); both are put back afterwards."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.NOTSET)
    return root


@pytest.mark.parametrize(("argv", "level"), [(["--debug", "plan"], logging.DEBUG), (["plan"], logging.WARNING)])
def test_main_sets_the_root_log_level_from_debug(argv: list[str], level: int, plan_runs, monkeypatch) -> None:
    root = bare_root_logger(monkeypatch)
    assert cli.main(argv) == 0
    assert len(plan_runs) == 1
    assert root.level == level


def test_common_options_given_before_the_command_keep_no_before_command_copy() -> None:
    args = cli.parse_args(["--manifest", "m.yaml", "--host", "ssh://node", "--json", "--debug", "plan"])
    assert (args.manifest, args.host, args.json, args.debug) == (Path("m.yaml"), "ssh://node", True, True)
    assert [name for name in vars(args) if name.startswith(cli.BEFORE)] == []


def test_the_common_options_parser_has_no_help_option_of_its_own() -> None:
    common = cli.common_options("")
    assert common.add_help is False
    assert [action for action in common._actions if "-h" in action.option_strings] == []


def test_the_exit_code_table_opens_with_its_heading() -> None:
    assert cli.exit_code_table().splitlines()[0] == "exit codes:"


def test_help_puts_the_exit_codes_heading_on_its_own_line_after_a_blank_one_below_the_commands() -> None:
    lines = cli.parser().format_help().splitlines()
    heading = lines.index("exit codes:")
    assert lines[heading - 1] == ""
    assert lines[heading - 2].startswith("  capacity PRESET")
    assert lines[heading + 1].split()[0] == "0"
