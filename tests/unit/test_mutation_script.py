"""scripts/mutation.sh refuses a timeout multiplier that is no number before it prepares or runs anything, and runs the
rollout model without its search for a shorter failure."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "mutation.sh"


@pytest.mark.parametrize("value", ["x", "-1", "1e3", ""])
def test_a_timeout_multiplier_that_is_no_number_exits_2_naming_it(value: str, tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(SCRIPT), "--timeout-multiplier", value], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.strip() == f"mutation.sh: --timeout-multiplier takes a number, not {value}".strip()
    assert not (tmp_path / ".cache").exists(), "nothing was prepared"


def test_the_help_names_the_timeout_multiplier_and_mutmuts_default() -> None:
    done = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, check=True)
    assert "--timeout-multiplier X" in done.stdout and "(default 15, mutmut's own)" in done.stdout


def test_a_mutation_run_stops_a_failing_model_run_at_its_failure() -> None:
    """The rollout model's search for a shorter failure can outlast a mutant's timeout: the script turns it off."""
    assert 'export KVBAKE_MODEL_SHRINK="${KVBAKE_MODEL_SHRINK:-0}"' in SCRIPT.read_text()
    done = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, check=True)
    assert "KVBAKE_MODEL_SHRINK   0 by default here" in done.stdout
