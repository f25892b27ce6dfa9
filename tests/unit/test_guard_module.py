"""The start-up check run by this machine's own interpreter, as site runs it from a .pth file: a chain's files as baked
pass and print the chain and the switch set; a file mounted or edited over one stops the process with the guard's code
(on), is only named (warn), or is not looked at (off)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvbake.guard.core.guard_module import GUARD_EXIT, MODULE_NAME, PTH_NAME, guard_source, pth_line

CHAIN = "93a0e649c55ed3aa"
BAKED = {"vllm/v1/kv_cache_interface.py": b"PACK = 1\n", "vllm/envs.py": b"VLLM_KVBAKE_PACK_FACTOR = None\n"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    """A source root as the thin layer leaves it: the chain's files, the guard module and its .pth line."""
    root = tmp_path / "dist-packages"
    for path, data in BAKED.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    (root / f"{MODULE_NAME}.py").write_text(guard_source({p: sha(d) for p, d in BAKED.items()}, CHAIN, ["VLLM_KVBAKE_PACK_FACTOR"]))
    (root / PTH_NAME).write_text(pth_line())
    return root


def start(root: Path, **env: str) -> subprocess.CompletedProcess:
    """An interpreter whose site folders include the root (site.addsitedir, as for dist-packages), then a line of work."""
    environment = {k: v for k, v in os.environ.items() if k != "KVBAKE_GUARD"} | env
    return subprocess.run([sys.executable, "-c", "import site, sys; site.addsitedir(sys.argv[1]); print('served')", str(root)],
                          capture_output=True, text=True, env=environment, timeout=60)


def test_the_baked_files_pass_and_the_chain_and_switch_set_are_printed_on_standard_error(root):
    done = start(root, VLLM_KVBAKE_PACK_FACTOR="2")
    assert done.returncode == 0 and done.stdout == "served\n", done
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"kvbake guard: chain {CHAIN}, 2 files checked") and "'VLLM_KVBAKE_PACK_FACTOR': '2'" in line, line
    assert "switches none" in start(root).stderr


def test_a_file_mounted_over_a_baked_one_stops_the_process_naming_the_file_and_the_chain(root):
    stale = root / "vllm/v1/kv_cache_interface.py"
    stale.write_bytes(b"PACK = 0  # last month's hot-fix\n")
    done = start(root)
    assert done.returncode == GUARD_EXIT and done.stdout == "", done
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"kvbake guard: {stale} (sha256 {sha(stale.read_bytes())[:12]}) is not chain {CHAIN}'s file "
                                  "(mounted or edited over the baked one)"), done.stderr
    assert "fix: remove the mount or the edit" in done.stderr


def test_warn_names_every_wrong_file_and_goes_on_and_off_checks_nothing(root):
    (root / "vllm/envs.py").unlink()
    (root / "vllm/v1/kv_cache_interface.py").write_bytes(b"edited\n")
    warned = start(root, KVBAKE_GUARD="warn")
    assert warned.returncode == 0 and warned.stdout == "served\n", warned
    first = warned.stderr.splitlines()[0]
    assert "vllm/envs.py (missing)" in first and "kv_cache_interface.py (sha256 " in first and "are not chain" in first
    assert first.endswith("KVBAKE_GUARD=warn: the process goes on")
    off = start(root, KVBAKE_GUARD="off")
    assert (off.returncode, off.stdout, off.stderr) == (0, "served\n", "")


def test_an_unknown_mode_is_named_and_checked_as_on(root):
    (root / "vllm/envs.py").write_bytes(b"edited\n")
    done = start(root, KVBAKE_GUARD="of")
    assert done.returncode == GUARD_EXIT and done.stderr.startswith("kvbake guard: KVBAKE_GUARD=of is not on, warn or off: checking as on\n")


def test_a_check_that_cannot_run_stops_the_process_in_mode_on_only(root):
    (root / f"{MODULE_NAME}.py").write_text(guard_source({"vllm/envs.py": sha(BAKED["vllm/envs.py"])}, CHAIN, []).replace(
        "import hashlib", "import kvbake_no_such_module as hashlib"))
    done = start(root)
    assert done.returncode == GUARD_EXIT and "kvbake guard: the check could not run (ModuleNotFoundError" in done.stderr
    assert start(root, KVBAKE_GUARD="warn").returncode == 0


def test_the_source_is_one_text_per_chain_and_refuses_paths_outside_the_root():
    files = {p: sha(d) for p, d in BAKED.items()}
    assert guard_source(files, CHAIN, ["B", "A"]) == guard_source(dict(reversed(list(files.items()))), CHAIN, ["A", "B"])
    assert guard_source(files, CHAIN, []) != guard_source(files, "another", [])
    for bad in ("/etc/passwd", "vllm/../../x.py", ""):
        with pytest.raises(ValueError):
            guard_source({bad: "0" * 64}, CHAIN, [])
