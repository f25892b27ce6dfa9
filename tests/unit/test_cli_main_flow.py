"""kvbake.cli.main: the handler each command reaches, progress bars, logging, and how a failure becomes its exit code."""

from __future__ import annotations

import argparse
import importlib
import io
import logging
import sys

import pytest

from kvbake import cli
from kvbake.errors import KvbakeError, LockError
from kvbake.terminal import progress
from tests.unit.message_words import says


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture()
def plan_runs(monkeypatch: pytest.MonkeyPatch) -> list[argparse.Namespace]:
    """`plan` records its arguments instead of reading a manifest; the progress setting is put back afterwards."""
    calls: list[argparse.Namespace] = []

    def record(args: argparse.Namespace) -> tuple[dict, str]:
        calls.append(args)
        return {"planned": True}, "planned"

    monkeypatch.setattr(importlib.import_module("kvbake.bake.commands"), "cmd_plan", record)
    monkeypatch.setitem(progress._SHOWN, "console", None)
    return calls


@pytest.mark.parametrize("command", sorted(cli.COMMAND_STAGES))
def test_every_command_reaches_the_cmd_function_of_its_stage(command: str) -> None:
    handler = cli.handler_of(command)
    assert handler.__module__ == f"kvbake.{cli.COMMAND_STAGES[command]}.commands"
    assert handler.__name__ == "cmd_" + command.replace("-", "_")


def test_progress_is_drawn_when_standard_error_is_a_terminal(plan_runs, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert cli.main(["plan"]) == 0
    assert progress.shown() is True
    assert capsys.readouterr().out == "planned\n"


def test_no_progress_with_json_even_on_a_terminal(plan_runs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", Terminal())
    progress.show_on_terminal(json_output=False)
    assert progress.shown() is True
    assert cli.main(["plan", "--json"]) == 0
    assert progress.shown() is False


def test_no_progress_off_a_terminal(plan_runs, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stderr", Terminal())
    progress.show_on_terminal(json_output=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert cli.main(["plan"]) == 0
    assert progress.shown() is False
    assert capsys.readouterr().out == "planned\n"


def test_a_failing_command_prints_its_line_on_stderr_and_returns_its_code(monkeypatch, capsys, caplog) -> None:
    def refuse(args: argparse.Namespace) -> tuple[dict, str]:
        raise LockError("the lock drifts", "run lock")

    monkeypatch.setattr(importlib.import_module("kvbake.bake.commands"), "cmd_plan", refuse)
    with caplog.at_level(logging.DEBUG, logger="kvbake"):
        assert cli.main(["plan"]) == 4
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err.count("\n") == 1
    assert says(printed.err, "error (lock)") and says(printed.err, "the lock drifts; fix: run lock")
    assert not [r for r in caplog.records if r.name == "kvbake"]


def test_debug_logs_the_traceback_of_a_failure(monkeypatch, capsys, caplog) -> None:
    def refuse(args: argparse.Namespace) -> tuple[dict, str]:
        raise LockError("the lock drifts")

    monkeypatch.setattr(importlib.import_module("kvbake.bake.commands"), "cmd_plan", refuse)
    with caplog.at_level(logging.DEBUG, logger="kvbake"):
        assert cli.main(["plan", "--debug"]) == 4
    logged = [r for r in caplog.records if r.name == "kvbake"]
    assert [r.getMessage() for r in logged] == ["failed"] and logged[0].exc_info is not None


def test_a_usage_error_logs_no_traceback_even_with_debug(capsys, caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger="kvbake"):
        assert cli.main(["--debug", "bake-everything"]) == 2
    assert not [r for r in caplog.records if r.name == "kvbake"]
    printed = capsys.readouterr()
    assert printed.out == "" and says(printed.err, "error (usage)")


@pytest.mark.parametrize(("debug", "level"), [(True, logging.DEBUG), (False, logging.WARNING)])
def test_logging_goes_to_stderr_at_the_level_debug_chooses(debug: bool, level: int, monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    cli.configure_logging(debug)
    assert root.level == level
    (handler,) = root.handlers
    assert handler.stream is sys.stderr
    assert handler.formatter._fmt == "%(levelname)s %(name)s: %(message)s"


def test_no_command_is_build_with_the_kvbake_builder() -> None:
    args = cli.parse_args([])
    assert (args.command, args.builder, args.prog) == ("build", "kvbake", cli.PROG)
    assert cli.parse_args(["plan"], "kvbake").builder == "kvbake"
    assert cli.parse_args(["plan"], "kvbake").prog == "kvbake"
    assert cli.parse_args(["verify", "--builder", "docker"]).builder == "docker"


def test_the_common_options_take_their_defaults_once_and_leave_no_trace_of_the_side() -> None:
    args = cli.parse_args(["plan"])
    assert (args.manifest, args.host, args.json, args.debug) == (cli.Path("manifest.yaml"), None, False, False)
    assert not [name for name in vars(args) if name.startswith(cli.BEFORE)]


def test_the_same_value_on_both_sides_is_one_value_and_different_ones_are_named() -> None:
    assert cli.parse_args(["--host", "h", "plan", "--host", "h"]).host == "h"
    with pytest.raises(KvbakeError) as caught:
        cli.parse_args(["--host", "a", "plan", "--host", "b"])
    assert caught.value.exit_code == 2
    assert says(caught.value.message, "--host is given before and after the command") and says(caught.value.message, "(a and b)")


def test_exit_1_means_a_bug_and_a_class_without_a_docstring_means_nothing() -> None:
    class Undocumented(KvbakeError):
        pass

    Undocumented.__doc__ = None
    assert cli.exit_meaning(KvbakeError) is KvbakeError.meaning
    assert cli.exit_meaning(Undocumented) == ""
    assert cli.exit_meaning(LockError) == "The lock is missing, malformed or drifted from the manifest."


def test_the_console_script_exits_with_the_code_and_names_itself(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["/opt/venv/bin/kvbake-wrapped", "bake-everything"])
    with pytest.raises(SystemExit) as caught:
        cli.entry()
    assert caught.value.code == 2
    assert says(capsys.readouterr().err, "see kvbake --help")


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from kvbake import __version__

    with pytest.raises(SystemExit) as caught:
        cli.parse_args(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out == f"kvbake {__version__}\n"
