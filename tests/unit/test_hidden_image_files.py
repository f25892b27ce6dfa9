"""A mount over a folder of the image hides the image's files there: the serve runs without them while the baked image
would hold them, so reading the serve refuses it, naming each hidden file; bytecode caches and files the mount holds
itself are no loss."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from kvbake.bake.core.container_files import hidden_image_files, refuse_hidden_image_files
from kvbake.errors import UsageError
from kvbake.ship.adapters.served_files import image_paths_under
from test_served_files_survivors import Copier

ROOT = "/usr/lib/py"


def test_an_image_file_the_mount_holds_no_file_at_is_hidden_and_caches_are_not():
    image = {f"{ROOT}/vllm/ops": ("vllm/ops/a.py", "vllm/ops/b.py", "vllm/ops/__pycache__/b.cpython-311.pyc", "vllm/ops/c.pyc")}
    assert hidden_image_files(image, {"vllm/ops/a.py", "vllm/ops/new.py"}) == {f"{ROOT}/vllm/ops": ("vllm/ops/b.py",)}


def test_a_mount_that_holds_every_image_file_hides_nothing():
    image = {f"{ROOT}/vllm/ops": ("vllm/ops/a.py",), f"{ROOT}/vllm/x.py": ("vllm/x.py",)}
    assert hidden_image_files(image, {"vllm/ops/a.py", "vllm/x.py"}) == {}


def test_the_refusal_names_the_mount_and_every_file_it_hides_in_one_line():
    hidden = {f"{ROOT}/vllm/ops": ("vllm/ops/b.py", "vllm/ops/sub/c.py")}
    with pytest.raises(UsageError) as caught:
        refuse_hidden_image_files("serve", hidden, ROOT)
    text = str(caught.value)
    assert f"{ROOT}/vllm/ops hides {ROOT}/vllm/ops/b.py, {ROOT}/vllm/ops/sub/c.py" in text and "\n" not in text
    assert "init: serve mounts a folder over its image's files" in text and "copy them from the image" in caught.value.fix
    refuse_hidden_image_files("serve", {}, ROOT)  # nothing hidden: no refusal


class ImageCopier(Copier):
    """An engine whose image holds these files and folders (name -> bytes), read through a created container."""

    def __init__(self, held: dict[str, bytes | dict[str, bytes]]) -> None:
        super().__init__(held)
        self.created: list[str] = []

    @contextmanager
    def created_container(self, image: str) -> Iterator[str]:
        self.created.append(image)
        yield "created-1"

    def copy_out(self, container: str, path: str, destination: Path) -> bool:
        assert container == "created-1", "the image's own files are read through a created container"
        return super().copy_out(container, path, destination)


def test_the_image_paths_under_each_mount_are_read_from_the_image_itself():
    engine = ImageCopier({f"{ROOT}/vllm/ops": {"a.py": b"a", "sub/b.py": b"b"}, f"{ROOT}/vllm/x.py": b"x"})
    found = image_paths_under(engine, "sha256:i", [f"{ROOT}/vllm/ops", f"{ROOT}/vllm/x.py", f"{ROOT}/vllm/new"], ROOT)
    assert found == {f"{ROOT}/vllm/ops": ("vllm/ops/a.py", "vllm/ops/sub/b.py"), f"{ROOT}/vllm/x.py": ("vllm/x.py",)}
    assert engine.created == ["sha256:i"]
    assert image_paths_under(engine, "sha256:i", [], ROOT) == {} and engine.created == ["sha256:i"], "no mount: no container"
