"""The digests of served files: each file of a running container's layer by its own copy, a link by its target's bytes
read through the container (a folder or a copy that failed partway is left out), each file of its image through a created container, and a refusal of foreign
start-up hooks that names every one and says how to go on."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from kvbake.engines.core.procfs import ImportOrigin
from kvbake.errors import IntegrityError
from kvbake.serve.core.serve_reading import read_serve
from kvbake.ship.adapters.serve_reader import RankServe
from kvbake.ship.adapters.served_files import foreign_hooks, image_digests, layer_digests, refuse_foreign_hooks

from helpers_manifest import sha

HOOK = "/usr/lib/python3/dist-packages/kvhook.pth"


class Node:
    """An engine whose containers hold files (bytes), folders (name -> bytes), links (a str target) and copies that
    fail partway (a tuple of the bytes written before the failure); an image's files are its created container's."""

    def __init__(self, containers: dict[str, dict[str, object]], images: dict[str, dict[str, object]] | None = None) -> None:
        self.containers = containers
        self.images = images or {}

    @contextmanager
    def created_container(self, image: str):
        self.containers["created-1"] = self.images[image]
        try:
            yield "created-1"
        finally:
            del self.containers["created-1"]

    def exec_in(self, container: str, argv: list[str]) -> str:
        """The reader kvbake runs in a container, answered for its links: each link's target, read on this machine."""
        held = self.containers.get(container, {})
        return repr([{"path": path, "link": held[path], "mode": 0o644, "data": Path(str(held[path])).read_bytes()}
                     for path in argv[3:] if isinstance(held.get(path), str)])

    def copy_out(self, container: str, path: str, destination: Path) -> bool:
        found = self.containers.get(container, {}).get(path)
        if found is None:
            return False
        if isinstance(found, bytes):
            destination.write_bytes(found)
            return True
        if isinstance(found, str):
            destination.symlink_to(found)
            return True
        if isinstance(found, tuple):
            destination.write_bytes(found[0])
            return False
        destination.mkdir()
        for name, data in found.items():
            (destination / name).write_bytes(data)
        return True


def test_each_file_of_the_layer_is_digested_from_its_own_copy_a_link_by_its_target_and_the_rest_left_out(tmp_path: Path):
    target = tmp_path / "elsewhere.py"
    target.write_bytes(b"linked\n")
    node = Node({"serve-1": {"/r/folder": {"x.py": b"x\n"}, "/r/a.py": b"a\n", "/r/link.py": str(target),
                             "/r/partial.py": (b"half",), "/r/b.py": b"b\n"}})
    paths = ["/r/folder", "/r/a.py", "/r/link.py", "/r/partial.py", "/r/gone.py", "/r/b.py"]
    assert layer_digests(node, "serve-1", paths) == {"/r/a.py": sha(b"a\n"), "/r/b.py": sha(b"b\n"), "/r/link.py": sha(b"linked\n")}
    assert layer_digests(node, "other", paths) == {}


def test_each_file_of_the_image_is_digested_and_a_missing_one_is_none():
    node = Node({}, {"sha256:i": {"/usr/x.py": b"x\n", "/Xtra/y.py": b"y\n"}})
    assert image_digests(node, "sha256:i", ["/usr/x.py", "/Xtra/y.py", "/usr/gone.py"]) == {
        "/usr/x.py": sha(b"x\n"), "/Xtra/y.py": sha(b"y\n"), "/usr/gone.py": None}
    assert node.containers == {}, "the created container is removed"


def rank_running(hook_bytes: bytes) -> RankServe:
    origin = ImportOrigin("/usr/lib/python3/dist-packages/vllm/__init__.py", ("/usr/lib/python3/dist-packages",),
                          hooks=((HOOK, sha(hook_bytes)),))
    return RankServe(read_serve([]), (origin,), {HOOK: "A"})


def test_a_hook_the_image_holds_with_the_same_bytes_is_no_foreign_hook():
    node = Node({}, {"sha256:i": {HOOK: b"a"}})
    container = {"Id": "c1", "Image": "sha256:i", "Mounts": []}
    assert foreign_hooks(node, container, rank_running(b"a"), "deploy: a") == []
    assert len(foreign_hooks(node, container, rank_running(b"b"), "deploy: a")) == 1


def test_a_refusal_of_foreign_hooks_names_every_node_and_gives_a_fix():
    node = Node({}, {"sha256:i": {}})
    container = {"Id": "c1", "Image": "sha256:i", "Mounts": []}
    ranks = [(name, node, container, rank_running(name.encode())) for name in ("a", "b")]
    lines = [foreign_hooks(node, container, rank, f"deploy: {name}")[0] for name, _, _, rank in ranks]
    with pytest.raises(IntegrityError) as refused:
        refuse_foreign_hooks("deploy", ranks)
    assert refused.value.message == f"{lines[0]}; {lines[1]}"
    assert refused.value.fix and "remove the hook" in refused.value.fix
    assert os.path.basename(HOOK) in lines[0]
