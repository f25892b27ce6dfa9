"""Every path a serve runs under its source root is read or refused by name: a symbolic link by its target's bytes (a
dangling one refused), a tmpfs at or under the source root through the container (one above it refused), a hard link
under each of its names, and a file whose executable bits differ from the image's refused."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from kvbake.bake.core.container_files import (READER, ContainerFile, mode_changes, parse_reading, refuse_mode_changes, served_copy,
                                              tmpfs_targets)
from kvbake.bake.core.served_overlay import record_dict, served_overlay
from kvbake.errors import UsageError
from kvbake.ship.adapters.served_files import changed_in_layer, copied_links, read_served_overlay, regular_files, tmpfs_files

ROOT = "/usr/lib/py"


def read_here(*paths: Path) -> tuple[ContainerFile, ...]:
    """READER run by this host's python3, as a serve's python3 runs it in its container."""
    return parse_reading(subprocess.run([sys.executable, "-c", READER, *map(str, paths)], check=True, capture_output=True, text=True).stdout)


def test_the_reader_follows_a_link_to_its_targets_bytes_and_names_where_it_points(tmp_path: Path):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "scheduler.py").write_bytes(b"patched = True\n")
    (tmp_path / "sched").mkdir()
    (tmp_path / "sched" / "scheduler.py").symlink_to(tmp_path / "mods" / "scheduler.py")
    (tmp_path / "sched" / "gone.py").symlink_to(tmp_path / "nowhere.py")
    (tmp_path / "sched" / "plain.py").write_bytes(b"plain\n")
    found = {Path(f.path).name: f for f in read_here(tmp_path / "sched")}
    assert found["scheduler.py"].link == str(tmp_path / "mods" / "scheduler.py") and found["scheduler.py"].data == b"patched = True\n"
    assert found["gone.py"].link == str(tmp_path / "nowhere.py") and found["gone.py"].data is None
    assert found["plain.py"].link is None and found["plain.py"].data == b"plain\n"
    assert read_here(tmp_path / "absent") == ()


def test_a_hard_link_is_read_under_each_of_its_names_once(tmp_path: Path):
    (tmp_path / "a.py").write_bytes(b"shared\n")
    os.link(tmp_path / "a.py", tmp_path / "b.py")
    assert sorted(regular_files(tmp_path)) == [("a.py", b"shared\n"), ("b.py", b"shared\n")]
    assert [(Path(f.path).name, f.data) for f in read_here(tmp_path)] == [("a.py", b"shared\n"), ("b.py", b"shared\n")]


def test_a_served_link_carries_its_targets_bytes_and_says_where_it_points_in_the_record():
    copy = served_copy(ContainerFile(f"{ROOT}/vllm/s.py", "/workspace/mods/s.py", 0o644, b"mod\n"), "changed in the container's writable layer", "serve")
    assert copy.data == b"mod\n" and copy.how.endswith(", a symbolic link to /workspace/mods/s.py (its target's bytes)")
    overlay, data = served_overlay(ROOT, "sha256:i", {"vllm/s.py": (copy.data, copy.how)}, {"vllm/s.py": b"image\n"})
    assert record_dict(overlay, ["a"])["files"][0]["how"] == copy.how and data == {"vllm/s.py": b"mod\n"}


def test_a_dangling_link_is_refused_naming_the_path_and_where_it_points():
    with pytest.raises(UsageError) as refused:
        served_copy(ContainerFile(f"{ROOT}/vllm/s.py", "/workspace/gone.py", None, None), "changed in the container's writable layer", "serve")
    assert f"serves {ROOT}/vllm/s.py, which is a symbolic link to /workspace/gone.py, which cannot be read" in refused.value.message
    assert refused.value.fix and refused.value.exit_code == 2


def test_tmpfs_mounts_at_or_under_the_source_root_are_read_and_one_above_it_is_refused():
    container = {"Name": "/serve", "HostConfig": {"Tmpfs": {f"{ROOT}/vllm/hot": "rw", "/run/cache": ""}},
                 "Mounts": [{"Type": "tmpfs", "Destination": f"{ROOT}/vllm/ops"}, {"Type": "bind", "Destination": f"{ROOT}/vllm/b.py"}]}
    assert tmpfs_targets(container, ROOT) == (f"{ROOT}/vllm/hot", f"{ROOT}/vllm/ops")
    for above in ({"HostConfig": {"Tmpfs": {"/usr/lib": ""}}}, {"Mounts": [{"Type": "tmpfs", "Destination": "/usr"}]}):
        with pytest.raises(UsageError, match=f"mounts a tmpfs at /usr(/lib)?, a folder above the source root {ROOT}"):
            tmpfs_targets({"Name": "/serve", **above}, ROOT)


def test_only_a_changed_executable_bit_of_a_file_the_image_holds_is_a_mode_change():
    served = {"x.py": 0o755, "same.py": 0o644, "group.py": 0o664, "new.sh": 0o755, "off.sh": 0o644}
    base = {"x.py": 0o644, "same.py": 0o644, "group.py": 0o644, "new.sh": None, "off.sh": 0o755}
    assert mode_changes(served, base) == ("off.sh", "x.py")
    with pytest.raises(UsageError, match=rf"serves {ROOT}/off.sh \(0644, the image's 0755\), {ROOT}/x.py \(0755, the image's 0644\)"):
        refuse_mode_changes("serve", served, base, ROOT)
    refuse_mode_changes("serve", {"same.py": 0o644}, base, ROOT)


class Reading:
    """An engine whose running container holds one link (docker cp copies the link) and runs READER on this host over
    `held`, the container's files by their paths there."""

    def __init__(self, link: str, held: Path) -> None:
        self.link, self.held = link, held
        self.ran: list[tuple[str, ...]] = []

    def copy_out(self, container: str, path: str, destination: Path) -> bool:
        destination.symlink_to(self.link)
        return True

    def exec_in(self, container: str, argv: list[str]) -> str:
        assert argv[:3] == ["python3", "-c", READER]
        self.ran.append(tuple(argv[3:]))
        local = [str(self.held / arg.lstrip("/")) for arg in argv[3:]]
        out = subprocess.run([sys.executable, "-c", READER, *local], check=True, capture_output=True, text=True).stdout
        return out.replace(str(self.held), "")


def test_a_link_changed_in_the_writable_layer_is_read_through_the_container_at_the_links_path(tmp_path: Path):
    held = tmp_path / "container"
    (held / "workspace").mkdir(parents=True)
    (held / "workspace" / "s.py").write_bytes(b"mod\n")
    (held / ROOT.lstrip("/") / "vllm").mkdir(parents=True)
    (held / ROOT.lstrip("/") / "vllm" / "s.py").symlink_to(held / "workspace" / "s.py")
    engine = Reading(str(held / "workspace" / "s.py"), held)
    (tmp_path / "scratch").mkdir()
    found = changed_in_layer(engine, {"Id": "c1", "Name": "/serve"}, {f"{ROOT}/vllm/s.py": "C"}, ROOT, tmp_path / "scratch")
    assert list(found) == ["vllm/s.py"] and found["vllm/s.py"].data == b"mod\n" and "a symbolic link to" in found["vllm/s.py"].how
    assert engine.ran == [(f"{ROOT}/vllm/s.py",)]
    assert copied_links(tmp_path / "scratch" / "changed-0") == [""]


def test_files_in_a_tmpfs_under_the_source_root_are_read_through_the_container(tmp_path: Path):
    held = tmp_path / "container"
    (held / ROOT.lstrip("/") / "vllm" / "hot").mkdir(parents=True)
    (held / ROOT.lstrip("/") / "vllm" / "hot" / "fix.py").write_bytes(b"fixed\n")
    engine = Reading("", held)
    found = tmpfs_files(engine, {"Id": "c1", "Name": "/serve", "HostConfig": {"Tmpfs": {f"{ROOT}/vllm/hot": ""}}}, ROOT)
    assert {p: (c.data, c.how) for p, c in found.items()} == {"vllm/hot/fix.py": (b"fixed\n", f"in a tmpfs at {ROOT}/vllm/hot")}


class Chmodded:
    """An engine whose serve `c1` holds the image's bytes of every file, made executable (chmod +x) when `executable`."""

    def __init__(self, executable: bool) -> None:
        self.executable = executable

    @contextlib.contextmanager
    def created_container(self, image: str) -> Iterator[str]:
        yield "image"

    def copy_out(self, container: str, path: str, destination: Path) -> bool:
        destination.write_bytes(b"same\n")
        destination.chmod(0o755 if container == "c1" and self.executable else 0o644)
        return True


def test_a_file_of_the_image_made_executable_in_the_serve_is_refused_by_the_reading_and_its_bytes_alone_are_no_change():
    serve = {"Id": "c1", "Name": "/serve", "Image": "sha256:i"}
    with pytest.raises(UsageError, match=rf"init: serve serves {ROOT}/vllm/run.py \(0755, the image's 0644\) with another mode"):
        read_served_overlay(Chmodded(True), serve, {f"{ROOT}/vllm/run.py": "C"}, ROOT)  # type: ignore[arg-type]
    overlay, data = read_served_overlay(Chmodded(False), serve, {f"{ROOT}/vllm/run.py": "C"}, ROOT)  # type: ignore[arg-type]
    assert overlay.files == () and data == {}
