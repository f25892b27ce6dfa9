"""docs/cli.md lists every command and option of `python build.py` and `kv_arith` as their parsers define them."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from kvbake.cli import parser
from kvbake.kvarith.cli import build_parser

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
BEGIN = "<!-- generated from the parsers: begin -->"
END = "<!-- generated from the parsers: end -->"
TYPE_WORDS = {None: "text", Path: "path", int: "integer", float: "number"}


def value_of(action: argparse.Action) -> str:
    """What an option takes: nothing (a flag), one of its choices, or its metavar and kind."""
    if action.nargs == 0:
        return "flag"
    if action.choices is not None:
        return "one of " + ", ".join(f"`{choice}`" for choice in action.choices)
    name = action.metavar or action.dest.upper()
    kind = TYPE_WORDS.get(action.type, getattr(action.type, "__name__", str(action.type)))
    return f"`{name}` ({kind})".replace("|", "\\|")


def default_of(action: argparse.Action) -> str:
    """The value the command sees when the option is left out; `—` for none, `unset` for a common option filled later."""
    if action.default is argparse.SUPPRESS:
        return "unset"
    if action.default is None or action.default is False:
        return "—"
    if isinstance(action.default, list):
        return "[" + ", ".join(map(str, action.default)) + "]"
    return f"`{action.default}`"


def notes_of(action: argparse.Action, groups: list[argparse._MutuallyExclusiveGroup]) -> str:
    notes = []
    if action.required:
        notes.append("required")
    if isinstance(action, argparse._AppendAction):
        notes.append("repeatable")
    if action.nargs == "?":
        notes.append("optional positional")
    for group in groups:
        if action in group._group_actions:
            others = [o.option_strings[0] for o in group._group_actions if o is not action]
            notes.append(("exactly one of it and " if group.required else "not with ") + ", ".join(others))
    if action.dest.startswith("before_command_"):
        notes.append("before the command")
    return "; ".join(notes)


def option_rows(command: argparse.ArgumentParser) -> list[str]:
    rows = ["| option | value | default | notes | help |", "|---|---|---|---|---|"]
    for action in command._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(action.option_strings) or action.dest
        help_text = (action.help or "").replace("|", "\\|")
        rows.append(f"| `{name}` | {value_of(action)} | {default_of(action)} | "
                    f"{notes_of(action, command._mutually_exclusive_groups)} | {help_text} |")
    return rows


def command_section(command: argparse.ArgumentParser, summary: str | None) -> list[str]:
    lines = [f"### `{command.prog}`", ""]
    if command.description or summary:
        lines += [command.description or summary or "", ""]
    return lines + option_rows(command) + [""]


def reference() -> str:
    """The generated part of docs/cli.md."""
    top = parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help for choice in commands._choices_actions}
    lines = ["## python build.py", "", f"Commands (`{commands.metavar}`, stored as `{commands.dest}`): "
             + ", ".join(f"`{name}`" for name in commands.choices), ""]
    lines += command_section(top, None)
    for name, command in commands.choices.items():
        lines += command_section(command, summaries[name])
    arith = build_parser()
    lines += ["## kv_arith", ""] + command_section(arith, None)
    return "\n".join(lines).strip("\n")


def documented() -> str:
    text = REFERENCE.read_text(encoding="utf-8")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def test_the_reference_lists_every_command_and_option_as_the_parsers_define_them() -> None:
    generated, written = reference(), documented()
    difference = "\n".join(difflib.unified_diff(written.splitlines(), generated.splitlines(), "docs/cli.md", "parsers", lineterm=""))
    assert generated == written, "docs/cli.md is stale; regenerate it with python tests/unit/test_cli_reference.py\n" + difference


def test_every_command_of_the_help_has_its_section() -> None:
    written = documented()
    top = parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for name in commands.choices:
        assert f"### `python build.py {name}`" in written


if __name__ == "__main__":  # regenerate the generated part of docs/cli.md
    text = REFERENCE.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    REFERENCE.write_text(head + BEGIN + "\n" + reference() + "\n" + END + rest.split(END, 1)[1], encoding="utf-8")
    sys.exit(0)
