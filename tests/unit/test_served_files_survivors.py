"""The files read out of a running serve: each file of a mounted or added folder under its own path, a mount that
cannot be copied out passed over without ending the reading, and a deleted file refused with a fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.errors import UsageError
from kvbake.ship.adapters.served_files import changed_in_layer, mounted_files

ROOT = "/usr/lib/py"


class Copier:
    """An engine whose container holds these files (bytes) and folders (name -> bytes); copy_out of anything else fails."""

    def __init__(self, held: dict[str, bytes | dict[str, bytes]]) -> None:
        self.held = held

    def copy_out(self, container: str, path: str, destination: Path) -> bool:
        found = self.held.get(path)
        if found is None:
            return False
        if isinstance(found, bytes):
            destination.write_bytes(found)
            return True
        for name, data in found.items():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            (destination / name).write_bytes(data)
        return True


def plain(found: dict) -> dict:
    """(bytes, how) of each file read."""
    return {path: (copy.data, copy.how) for path, copy in found.items()}


def serve(*targets: str) -> dict:
    return {"Id": "c1", "Name": "/serve", "Image": "sha256:i",
            "Mounts": [{"Type": "bind", "Source": f"/srv{target}", "Destination": target} for target in targets]}


def test_each_file_of_a_mounted_folder_is_named_by_its_own_path(tmp_path: Path):
    engine = Copier({f"{ROOT}/vllm/ops": {"a.py": b"a\n", "sub/b.py": b"b\n"}})
    found = plain(mounted_files(engine, serve(f"{ROOT}/vllm/ops"), ROOT, tmp_path))
    assert found == {"vllm/ops/a.py": (b"a\n", f"mounted from /srv{ROOT}/vllm/ops"),
                     "vllm/ops/sub/b.py": (b"b\n", f"mounted from /srv{ROOT}/vllm/ops")}


def test_a_mount_that_cannot_be_copied_out_is_passed_over_and_the_next_is_read(tmp_path: Path):
    engine = Copier({f"{ROOT}/vllm/b.py": b"b\n"})
    found = plain(mounted_files(engine, serve(f"{ROOT}/vllm/a.py", f"{ROOT}/vllm/b.py"), ROOT, tmp_path))
    assert found == {"vllm/b.py": (b"b\n", f"mounted from /srv{ROOT}/vllm/b.py")}


def test_each_file_of_a_folder_added_in_the_writable_layer_is_named_by_its_own_path(tmp_path: Path):
    engine = Copier({f"{ROOT}/vllm/extra": {"a.py": b"a\n", "b.py": b"b\n"}})
    found = plain(changed_in_layer(engine, serve(), {f"{ROOT}/vllm/extra": "A"}, ROOT, tmp_path))
    assert sorted(found) == ["vllm/extra/a.py", "vllm/extra/b.py"] and found["vllm/extra/b.py"][0] == b"b\n"


def test_a_file_deleted_in_the_writable_layer_is_refused_naming_it_with_a_fix(tmp_path: Path):
    with pytest.raises(UsageError) as refused:
        changed_in_layer(Copier({}), serve(), {f"{ROOT}/vllm/a.py": "D"}, ROOT, tmp_path)
    assert f"{ROOT}/vllm/a.py" in refused.value.message and refused.value.fix and "docker cp" in refused.value.fix
