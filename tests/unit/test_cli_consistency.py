"""The CLI agrees with its documentation: the exit-code page's table, the options each command offers, usage errors
raised before any file or engine is read, and the code-selecting variables the verify-running row lists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvbake.cli import exit_code_table, main
from kvbake.errors import EXIT_CODES
from usage_errors import usage_parts

ROOT = Path(__file__).resolve().parents[2]
EXIT_CODES_PAGE = ROOT / "docs" / "exit_codes.md"
COMMANDS_PAGE = ROOT / "docs" / "commands.md"


def documented_exit_rows() -> dict[int, str]:
    """Code -> "<kind>: <meaning>" from the table of docs/exit_codes.md (generated from kvbake/errors.py)."""
    rows = {}
    for line in EXIT_CODES_PAGE.read_text().splitlines():
        if re.match(r"^\| \d+ \|", line):
            code, kind, _cls, meaning = (cell.strip() for cell in line.strip("|").split(" | ")[:4])
            rows[int(code)] = f"{kind}: {meaning}" if code != "0" else kind
    return rows


def help_exit_lines() -> dict[int, str]:
    """Code -> the whole text `--help` prints for it."""
    return {int(code): text for code, text in (line.split(None, 1) for line in exit_code_table().splitlines()[1:])}


def help_exit_rows() -> dict[int, str]:
    """Code -> the title `--help` prints for it."""
    return {code: text.split(":", 1)[0] for code, text in help_exit_lines().items()}


def test_the_exit_code_page_equals_the_help_table() -> None:
    documented, shown = documented_exit_rows(), help_exit_rows()
    assert sorted(documented) == sorted(shown) == sorted([0, *(cls.exit_code for cls in EXIT_CODES)])
    for code, title in shown.items():
        assert documented[code] == title or documented[code].startswith(title + ": "), (code, title, documented[code])


def test_help_says_what_the_exit_code_page_says_of_exit_1() -> None:
    documented = documented_exit_rows()[1].replace("`", "")
    assert documented == "error: an unexpected failure (a bug: please report it with --debug output)"
    assert help_exit_lines()[1] == documented


@pytest.mark.parametrize("command", ["verify-running", "status"])
def test_break_lock_is_offered_only_where_it_acts(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--break-lock"]) == 2
    cause, fix = usage_parts(capsys.readouterr().err)
    assert cause.endswith("--break-lock") and fix.startswith("see python build.py ")


@pytest.mark.parametrize("command", ["deploy", "rollback"])
def test_break_lock_is_offered_where_a_lock_is_taken(command: str) -> None:
    from kvbake.cli import parse_args

    assert parse_args([command, "--break-lock"]).break_lock is True


def test_deploy_without_a_preset_is_a_usage_error_before_any_file_is_read(tmp_path: Path, capsys) -> None:
    assert main(["deploy", "--manifest", str(tmp_path / "absent.yaml"), "--deploy", str(tmp_path / "absent.yaml")]) == 2
    cause, fix = usage_parts(capsys.readouterr().err)
    assert "--preset" in cause and fix.endswith(" deploy --help")


@pytest.mark.parametrize(("first", "second"), [("--resume", "--revert"), ("--revert", "--resume")])
def test_resume_and_revert_together_are_a_usage_error_before_any_file_is_read(first: str, second: str, tmp_path: Path, capsys,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from kvbake.ship import commands
    from kvbake.engines.adapters import client

    monkeypatch.setattr(client, "DockerClient", lambda *a, **k: pytest.fail("the engine was contacted"))
    monkeypatch.setattr(commands, "_ship_context", lambda *a, **k: pytest.fail("a file was read"))
    absent = str(tmp_path / "absent.yaml")
    assert main(["deploy", first, second, "--manifest", absent, "--deploy", absent]) == 2
    cause, fix = usage_parts(capsys.readouterr().err)
    assert cause.startswith(f"argument {second}: ") and cause.endswith(first) and fix.endswith(" deploy --help")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_deployment_file_names_it_and_an_existing_section(tmp_path: Path, capsys) -> None:
    from kvbake.deployfile import load_deployment
    from kvbake.errors import ManifestError

    with pytest.raises(ManifestError) as caught:
        load_deployment(tmp_path / "gone.yaml")
    assert caught.value.exit_code == 3
    assert "gone.yaml" in caught.value.message and "not found" in caught.value.message
    assert "--deploy PATH" in caught.value.fix and "Deploy, rollback and recovery" in caught.value.fix


def test_the_commands_page_lists_exactly_the_code_selecting_variables_verify_running_flags() -> None:
    from kvbake.serve.core.serve_description import CODE_OVERRIDES

    row = next(line for line in COMMANDS_PAGE.read_text().splitlines() if line.startswith("| `python build.py verify-running"))
    listed = re.search(r"no code-selecting override \(([^)]*)\)", row).group(1)
    assert tuple(re.findall(r"`([A-Z_]+)`", listed)) == CODE_OVERRIDES
