"""Engine.inspect_image: python-on-whales' image object read into the plain inspect data the pure checks use, an absent
image as None, and any other refusal as an engine error naming the engine and the reference."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from python_on_whales.exceptions import DockerException, NoSuchImage

from kvbake.engines.adapters.client import Engine
from kvbake.errors import EngineError


class Images:
    def __init__(self, answer) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def inspect(self, reference: str):
        self.asked.append(reference)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def engine_answering(answer) -> Engine:
    engine = Engine.__new__(Engine)
    engine.host, engine.label = "unix:///node.sock", "unix:///node.sock"
    engine.client = SimpleNamespace(image=Images(answer))
    return engine


def image(**config) -> SimpleNamespace:
    settings = {"labels": {"org.kvbake.x": "1"}, "env": ["PATH=/usr/bin", "A=1"], "entrypoint": ["python3"], "cmd": ["-m", "vllm"],
                "working_dir": Path("/srv"), "user": "1000", **config}
    return SimpleNamespace(id="sha256:" + "1" * 64, repo_tags=["base:1"], repo_digests=["reg/base@sha256:" + "2" * 64],
                           architecture="arm64", os="linux", variant="v8", root_fs=SimpleNamespace(layers=["sha256:" + "3" * 64]),
                           config=SimpleNamespace(**settings))


def test_the_image_object_becomes_plain_inspect_data():
    engine = engine_answering(image())
    assert engine.inspect_image("base:1") == {
        "Id": "sha256:" + "1" * 64, "RepoTags": ["base:1"], "RepoDigests": ["reg/base@sha256:" + "2" * 64],
        "Architecture": "arm64", "Os": "linux", "Variant": "v8", "RootFS": {"Layers": ["sha256:" + "3" * 64]},
        "Config": {"Labels": {"org.kvbake.x": "1"}, "Env": ["PATH=/usr/bin", "A=1"], "Entrypoint": ["python3"], "Cmd": ["-m", "vllm"],
                   "WorkingDir": "/srv", "User": "1000"}}
    assert engine.client.image.asked == ["base:1"]


def test_unset_fields_read_as_the_engine_states_them():
    bare = image(labels=None, env=None, entrypoint=None, cmd=None, working_dir=Path("."), user="")
    bare.repo_tags, bare.repo_digests, bare.root_fs = None, None, SimpleNamespace(layers=None)
    del bare.variant
    found = engine_answering(bare).inspect_image("x")
    assert (found["RepoTags"], found["RepoDigests"], found["Variant"], found["RootFS"]) == ([], [], None, {"Layers": []})
    assert found["Config"] == {"Labels": {}, "Env": [], "Entrypoint": None, "Cmd": None, "WorkingDir": "", "User": ""}


def test_an_absent_image_is_none_and_another_refusal_is_an_engine_error():
    assert engine_answering(NoSuchImage(["docker", "image", "inspect", "x"], 1, b"", b"Error: No such image: x")).inspect_image("x") is None
    refused = engine_answering(DockerException(["docker", "image", "inspect", "x"], 1, b"", b"permission denied\n"))
    with pytest.raises(EngineError) as caught:
        refused.inspect_image("x")
    assert caught.value.exit_code == 8
    assert caught.value.one_line().startswith("unix:///node.sock: inspect x failed (permission denied)")
