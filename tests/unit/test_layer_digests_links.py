"""The digests of an adopted serve's changed files: a symbolic link counts by its target's bytes, read through the
container's own python3 (`docker cp` copies the link itself); a dangling link, or a container without python3, leaves
the path out, which verify-running then names as gone."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from kvbake.bake.core.container_files import READER
from kvbake.errors import EngineError
from kvbake.ship.adapters.served_files import layer_digests


class LinkedContainer:
    """A container whose files live in a folder of this machine: `docker cp` copies a link as a link, and an exec of
    python3 runs this machine's python3 (there: `root` is the container's /)."""

    def __init__(self, root: Path, python3: bool = True) -> None:
        self.root, self.python3 = root, python3

    def copy_out(self, container: str, path: str, destination: Path) -> bool:
        source = self.root / path.lstrip("/")
        if source.is_symlink():
            destination.symlink_to(os.readlink(source))
            return True
        if source.is_file():
            destination.write_bytes(source.read_bytes())
            return True
        return False

    def exec_in(self, container: str, argv: list[str]) -> str:
        if not self.python3:
            raise EngineError("exec in serve failed (python3: not found)", "check the engine")
        assert argv[:3] == ["python3", "-c", READER]
        paths = [str(self.root / path.lstrip("/")) for path in argv[3:]]
        out = subprocess.run([sys.executable, "-c", READER, *paths], capture_output=True, text=True, check=True).stdout
        return out.replace(str(self.root), "")


def test_a_linked_mod_counts_by_its_targets_bytes_and_a_dangling_link_is_left_out(tmp_path: Path):
    (tmp_path / "mods").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "mods" / "scheduler.py").write_bytes(b"# the mod\n")
    (tmp_path / "src" / "scheduler.py").symlink_to(tmp_path / "mods" / "scheduler.py")
    (tmp_path / "src" / "plain.py").write_bytes(b"plain\n")
    (tmp_path / "src" / "dangling.py").symlink_to(tmp_path / "mods" / "gone.py")
    found = layer_digests(LinkedContainer(tmp_path), "serve", ["/src/scheduler.py", "/src/plain.py", "/src/dangling.py", "/src/none.py"])
    assert found == {"/src/scheduler.py": hashlib.sha256(b"# the mod\n").hexdigest(), "/src/plain.py": hashlib.sha256(b"plain\n").hexdigest()}


def test_a_container_without_python3_leaves_its_links_out(tmp_path: Path):
    (tmp_path / "src").mkdir()
    (tmp_path / "target.py").write_bytes(b"x\n")
    (tmp_path / "src" / "linked.py").symlink_to(tmp_path / "target.py")
    assert layer_digests(LinkedContainer(tmp_path, python3=False), "serve", ["/src/linked.py"]) == {}
