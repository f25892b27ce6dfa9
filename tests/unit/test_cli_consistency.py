"""The CLI agrees with its documentation: the README's exit-code table, the options each command offers, usage errors
raised before any file or engine is read, and every README section an error message points to."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvbake.cli import exit_code_table, main
from kvbake.errors import EXIT_CODES
from usage_errors import usage_parts

README = Path(__file__).resolve().parents[2] / "README.md"
PACKAGE = Path(__file__).resolve().parents[2] / "kvbake"


def readme_exit_rows() -> dict[int, str]:
    """Code -> the README's meaning, from the table under "Exit codes"."""
    section = README.read_text().split("### Exit codes", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in section.splitlines()[2:]:
        code, meaning = (cell.strip() for cell in line.strip("|").split("|", 1))
        rows[int(code)] = meaning
    return rows


def help_exit_lines() -> dict[int, str]:
    """Code -> the whole text `--help` prints for it."""
    return {int(code): text for code, text in (line.split(None, 1) for line in exit_code_table().splitlines()[1:])}


def help_exit_rows() -> dict[int, str]:
    """Code -> the title `--help` prints for it."""
    return {code: text.split(":", 1)[0] for code, text in help_exit_lines().items()}


def test_the_readme_exit_code_table_equals_the_help_table() -> None:
    readme, shown = readme_exit_rows(), help_exit_rows()
    assert sorted(readme) == sorted(shown) == sorted([0, *(cls.exit_code for cls in EXIT_CODES)])
    for code, title in shown.items():
        assert readme[code] == title or readme[code].startswith(title + ": "), (code, title, readme[code])


def test_help_says_what_the_readme_says_of_exit_1() -> None:
    readme = readme_exit_rows()[1].replace("`", "")
    assert readme == "error: an unexpected failure (a bug: please report it with --debug output)"
    assert help_exit_lines()[1] == readme


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


def readme_headings() -> list[str]:
    return [line.lstrip("#").strip() for line in README.read_text().splitlines() if line.startswith("#")]


def test_every_readme_section_an_error_points_to_exists() -> None:
    pointers = {match for path in PACKAGE.rglob("*.py") for match in re.findall(r"see README: ([^)\"]+)\)", path.read_text())}
    assert pointers, "no message points to the README"
    for pointer in sorted(pointers):
        assert any(heading.startswith(pointer) for heading in readme_headings()), f"README has no section {pointer!r}"


def test_a_missing_deployment_file_names_it_and_an_existing_section(tmp_path: Path, capsys) -> None:
    from kvbake.deployfile import load_deployment
    from kvbake.errors import ManifestError

    with pytest.raises(ManifestError) as caught:
        load_deployment(tmp_path / "gone.yaml")
    assert caught.value.exit_code == 3
    assert "gone.yaml" in caught.value.message and "not found" in caught.value.message
    assert "--deploy PATH" in caught.value.fix and "Deploy, rollback and recovery" in caught.value.fix


def test_the_readme_lists_exactly_the_code_selecting_variables_verify_running_flags() -> None:
    from kvbake.serve.core.serve_description import CODE_OVERRIDES

    row = next(line for line in README.read_text().splitlines() if line.startswith("| `python build.py verify-running"))
    listed = re.search(r"no code-selecting override \(([^)]*)\)", row).group(1)
    assert tuple(re.findall(r"`([A-Z_]+)`", listed)) == CODE_OVERRIDES
