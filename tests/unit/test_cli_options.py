"""The common options (--manifest, --host, --json, --debug) reach the command from either side of it; a conflict is a usage error."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

import pytest

from kvbake.cli import handler_of, main

COMMANDS = ["build", "plan", "verify", "push", "status", "verify-running"]


@pytest.fixture()
def seen(monkeypatch: pytest.MonkeyPatch) -> list[argparse.Namespace]:
    """Replace every command handler by one that records the arguments it got."""
    calls: list[argparse.Namespace] = []

    def record(args: argparse.Namespace) -> tuple[dict, str]:
        calls.append(args)
        return {"command": args.command}, f"ran {args.command}"

    for command in COMMANDS:
        stage = importlib.import_module(handler_of(command).__module__)
        monkeypatch.setattr(stage, "cmd_" + command.replace("-", "_"), record)
    return calls


def run(argv: list[str], seen: list[argparse.Namespace]) -> argparse.Namespace:
    assert main(argv) == 0
    assert len(seen) == 1
    return seen[0]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_manifest_reaches_the_command_from_either_side(command: str, before: bool, seen) -> None:
    option = ["--manifest", "other.yaml"]
    args = run(option + [command] if before else [command] + option, seen)
    assert args.command == command
    assert args.manifest == Path("other.yaml")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_host_reaches_the_command_from_either_side(command: str, before: bool, seen) -> None:
    option = ["--host", "ssh://node"]
    args = run(option + [command] if before else [command] + option, seen)
    assert args.host == "ssh://node"


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_json_reaches_the_command_from_either_side(before: bool, seen, capsys: pytest.CaptureFixture[str]) -> None:
    args = run(["--json", "plan"] if before else ["plan", "--json"], seen)
    assert args.json is True
    assert json.loads(capsys.readouterr().out) == {"command": "plan"}


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_debug_reaches_the_command_from_either_side(before: bool, seen) -> None:
    args = run(["--debug", "verify"] if before else ["verify", "--debug"], seen)
    assert args.debug is True


def test_without_options_every_default_is_filled_once(seen, capsys: pytest.CaptureFixture[str]) -> None:
    args = run(["plan"], seen)
    assert (args.manifest, args.host, args.json, args.debug) == (Path("manifest.yaml"), None, False, False)
    assert not [key for key in vars(args) if key.startswith("before_command_")]
    assert capsys.readouterr().out == "ran plan\n"


def test_no_command_is_build_and_takes_the_options(seen) -> None:
    args = run(["--manifest", "m.yaml", "--host", "tcp://h:2375"], seen)
    assert (args.command, args.manifest, args.host) == ("build", Path("m.yaml"), "tcp://h:2375")


def test_the_same_value_on_both_sides_is_accepted(seen) -> None:
    args = run(["--host", "ssh://node", "--json", "verify", "--host", "ssh://node", "--json"], seen)
    assert (args.host, args.json) == ("ssh://node", True)


@pytest.mark.parametrize("argv,option", [
    (["--manifest", "a.yaml", "plan", "--manifest", "b.yaml"], "--manifest"),
    (["--host", "ssh://one", "verify", "--host", "ssh://two"], "--host"),
])
def test_different_values_on_both_sides_are_a_usage_error(argv: list[str], option: str, seen,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error (usage): {option} is given before and after the command with different values") and err.count("\n") == 1
    assert seen == []
