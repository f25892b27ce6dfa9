"""The program name follows how kvbake was invoked: `kvbake` for the console script, `python build.py` for build.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvbake.cli import main, parser
from usage_errors import usage_parts

REPO = Path(__file__).resolve().parents[2]
CONSOLE_SCRIPT = Path(sys.executable).parent / "kvbake"


def invoke(how: str, *argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    command = [str(CONSOLE_SCRIPT)] if how == "kvbake" else [sys.executable, str(REPO / "build.py")]
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    return subprocess.run([*command, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("prog", ["kvbake", "python build.py"])
def test_the_usage_line_and_the_fix_name_the_program(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert parser(prog).format_usage().startswith(f"usage: {prog} ")
    assert main(["plan", "--dry-run"], prog) == 2
    cause, fix = usage_parts(capsys.readouterr().err)
    assert cause.endswith("--dry-run") and fix == f"see {prog} --help"
    assert main(["verify", "--deep=yes"], prog) == 2
    assert f"fix: see {prog} verify --help\n" in capsys.readouterr().err
    assert main(["deploy", "--manifest", "absent.yaml"], prog) == 2
    assert capsys.readouterr().err.endswith(f"; fix: see {prog} deploy --help\n")


def test_build_py_is_the_default_program() -> None:
    assert parser().prog == "python build.py"


def test_config_without_a_preset_names_the_program(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.helpers_manifest import write_manifest

    manifest = write_manifest(tmp_path)
    assert main(["config", "--manifest", str(manifest)], "kvbake") == 2
    assert capsys.readouterr().err.endswith("; fix: see kvbake config --help\n")


@pytest.mark.skipif(not CONSOLE_SCRIPT.is_file(), reason="kvbake is not installed as a console script beside this python")
@pytest.mark.parametrize(("how", "prog"), [("kvbake", "kvbake"), ("build.py", "python build.py")])
def test_both_entry_points_name_themselves(how: str, prog: str, tmp_path: Path) -> None:
    shown = invoke(how, "--help")
    assert shown.returncode == 0 and shown.stdout.startswith(f"usage: {prog} [-h]"), shown.stdout
    failed = invoke(how, "bake", cwd=tmp_path)
    assert failed.returncode == 2
    assert failed.stderr.startswith("error (usage): argument COMMAND: invalid choice: 'bake'"), failed.stderr
    assert failed.stderr.endswith(f"; fix: see {prog} --help\n"), failed.stderr
    deploy = invoke(how, "deploy", cwd=tmp_path)
    cause, fix = usage_parts(deploy.stderr)
    assert "--preset" in cause and fix == f"see {prog} deploy --help"
