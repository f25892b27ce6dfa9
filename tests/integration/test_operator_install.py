"""The operator's install: a venv with the hash-pinned dependencies and kvbake, no engine installed or started; its
`kvbake doctor` then checks the rig's engine, registry and nodes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.default_engine_only]  # engine-independent: the default engine is enough
ROOT = Path(__file__).resolve().parents[2]
ENGINE_WORDS = ("apt-get", "apt ", "dpkg", "dockerd", "systemctl", "service ", "containerd", "install_engines", "setup.sh")


# Run by the installed python outside the repository: where kvbake comes from, whether a rig module can be found, and
# how many of the installed distribution's files belong to a rig.
RIG_PROBE = ("import importlib.metadata, importlib.util, pathlib, kvbake; "
             "print(pathlib.Path(kvbake.__file__).parents[3]); "
             "print(importlib.util.find_spec('kvbake_rig'), importlib.util.find_spec('kvbake.rig')); "
             "print(sum(str(f).startswith(('kvbake_rig', 'kvbake/rig')) for f in importlib.metadata.files('kvbake')))")


def engines_running(rig: dict) -> set[str]:
    """The engine daemons this pass relies on that run: the machine's own engine (no private config file) and the rig's
    node engines with their containerd (not per-container shims, and not the private engines other profiles' passes
    start and stop at the same time)."""
    found = subprocess.run(["pgrep", "-a", "-x", "dockerd|containerd"], capture_output=True, text=True).stdout
    ours = [str(rig[key].runtime) for key in ("a", "b")]
    return {line for line in found.splitlines()
            if "<defunct>" not in line and ("--config" not in line or any(folder in line for folder in ours))}


def lock_pins() -> set[str]:
    """The runtime part of the lock: what operators install (the test extra's pins follow its marker)."""
    runtime = (ROOT / "requirements.lock").read_text().split("# --- test extra")[0]
    return {line.split(" ", 1)[0].strip() for line in runtime.splitlines() if "==" in line}


def test_the_install_script_names_no_engine_step() -> None:
    text = (ROOT / "scripts" / "install_operator.sh").read_text()
    commands = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert not [word for word in ENGINE_WORDS for line in commands if word in line]


def test_the_operator_install_pins_everything_touches_no_engine_and_its_doctor_runs(shipped, rig, tmp_path) -> None:
    venv = tmp_path / "venv"
    before = engines_running(rig)
    assert len(before) >= 2, before  # at least the rig's two node engines
    done = subprocess.run(["bash", str(ROOT / "scripts" / "install_operator.sh"), str(venv)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PIP_NO_INPUT": "1"}, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert engines_running(rig) == before, "the install started or stopped an engine"
    frozen = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze", "--exclude", "kvbake"], capture_output=True, text=True,
                            check=True).stdout
    installed = {line.replace("_", "-").lower() for line in frozen.split() if "==" in line}
    assert installed == lock_pins(), installed ^ lock_pins()
    # the development rig is no part of what operators install: neither kvbake_rig nor a rig inside the package
    where = subprocess.run([str(venv / "bin" / "python"), "-c", RIG_PROBE], capture_output=True, text=True, cwd=tmp_path,
                           env={"PATH": "/usr/bin:/bin"}, check=True).stdout.split()
    assert where == [str(venv / "lib"), "None", "None", "0"], where
    launcher = subprocess.run([str(venv / "bin" / "kvbake-launch-vllm"), "--print"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert launcher.returncode == 2 and launcher.stderr.startswith("kvbake-launch-vllm: KVBAKE_IMAGE is not set"), "the reference launcher is installed"
    doctor = subprocess.run([str(venv / "bin" / "kvbake"), "doctor", "--manifest", str(shipped["manifest"]), "--deploy", str(shipped["deploy"]),
                             "--registry", rig["registry"].address, "--disk-floor", "0.1", "--mem-floor", "0.1"],
                            capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"})
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "ok    node spark-b" in doctor.stdout and "ok    base on spark-a" in doctor.stdout
