"""The import probe run by this machine's own interpreter: every start-up hook by its path on sys.path and, for a link,
by its real path too; the interpreter's site module and the modules a .pth file's import lines load are hooks too."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from kvbake.engines.core.procfs import ORIGINS, Process, origins_request, parse_origins
from kvbake.ship.core.startup_hooks import unproven_hooks


def probe(folder: Path) -> dict[str, str]:
    """The hooks the probe reports for a python3 whose PYTHONPATH is `folder`."""
    process = Process(1, 0, ("python3",), {"PYTHONPATH": str(folder), "PATH": os.environ.get("PATH", "")}, str(folder), sys.executable)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", ORIGINS, origins_request([process], ["-"])], capture_output=True, text=True,
                          check=True, timeout=60)
    (origin,) = parse_origins(done.stdout, 1)
    assert origin.error is None, origin.error
    return dict(origin.hooks)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_linked_pth_is_reported_at_its_path_and_at_its_target(tmp_path: Path):
    elsewhere = tmp_path / "shm"
    elsewhere.mkdir()
    target = elsewhere / "switch.pth"
    target.write_bytes(b"import os\n")
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "switch.pth").symlink_to(target)
    hooks = probe(folder)
    assert hooks[str(folder / "switch.pth")] == hooks[str(target)] == sha(b"import os\n")


def test_the_site_module_and_what_a_pth_imports_are_hooks(tmp_path: Path):
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "hook.pth").write_bytes(b"import kvbake_probe_helper; kvbake_probe_helper.go()\n")
    (folder / "kvbake_probe_helper.py").write_bytes(b"def go():\n    pass\n")
    hooks = probe(folder)
    assert hooks[str(folder / "kvbake_probe_helper.py")] == sha(b"def go():\n    pass\n")
    site_file = subprocess.run([sys.executable, "-c", "import site; print(site.__file__)"], capture_output=True, text=True,
                               check=True).stdout.strip()
    assert os.path.realpath(site_file) in hooks


def test_a_hook_on_a_kernel_file_system_is_never_the_images():
    from kvbake.engines.core.procfs import ImportOrigin

    origin = ImportOrigin("/src/vllm/__init__.py", ("/src",), hooks=(("/src/a.pth", "1"), ("/dev/shm/a.pth", "1"), ("/usr/lib/x.pth", "2")))
    assert unproven_hooks([origin], {}, ()) == {"/dev/shm/a.pth": "1"}


def test_the_modules_a_sitecustomize_imports_are_hooks_wherever_they_live(tmp_path: Path):
    """The image's own sitecustomize can import a module outside the source root that sets a switch: that module is
    reported by its path, so a copy changed in the writable layer or mounted over the image's is caught."""
    folder, elsewhere = tmp_path / "site", tmp_path / "opt"
    (elsewhere / "ops_tools").mkdir(parents=True)
    folder.mkdir()
    (folder / "sitecustomize.py").write_bytes(b"import kvbake_switch_setter\nfrom ops_tools.env import apply\n")
    (elsewhere / "kvbake_switch_setter.py").write_bytes(b"import os\nos.environ['VLLM_X'] = '1'\n")
    (elsewhere / "ops_tools" / "__init__.py").write_bytes(b"")
    process = Process(1, 0, ("python3",), {"PYTHONPATH": f"{folder}{os.pathsep}{elsewhere}", "PATH": os.environ.get("PATH", "")},
                      str(folder), sys.executable)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", ORIGINS, origins_request([process], ["-"])], capture_output=True,
                          text=True, check=True, timeout=60)
    (origin,) = parse_origins(done.stdout, 1)
    hooks = dict(origin.hooks)
    assert hooks[str(elsewhere / "kvbake_switch_setter.py")] == sha(b"import os\nos.environ['VLLM_X'] = '1'\n")
    assert str(elsewhere / "ops_tools" / "__init__.py") in hooks, "a from-import's package is a hook too"
    changed = {str(elsewhere / "kvbake_switch_setter.py"): "C"}
    assert list(unproven_hooks([origin], changed, ())) == [str(elsewhere / "kvbake_switch_setter.py")], "changed after the image: unproven"
