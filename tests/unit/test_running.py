"""Tests of the pure rank checks: the image a rank runs is the release's, by the identity its node's store uses."""

from __future__ import annotations

import pytest

from kvbake.running import expected_image_id, rank_failures

CONFIG = "sha256:" + "c" * 64
MANIFEST = "sha256:" + "m" * 64
PINNED = "127.0.0.1:5000/kvbake/x@" + MANIFEST
LAYERS = ("sha256:" + "1" * 64, "sha256:" + "2" * 64)


def container(image: str, env=(), running=True, mounts=()) -> dict:
    return {"Image": image, "State": {"Running": running}, "Config": {"Env": list(env)}, "Mounts": list(mounts)}


def image() -> dict:
    return {"RootFS": {"Layers": list(LAYERS)}, "Config": {"Labels": {"org.kvbake.format": "1"}}}


@pytest.mark.parametrize(("store", "expected"), [("classic", (CONFIG, "config digest")), ("containerd", (MANIFEST, "manifest digest"))])
def test_the_expected_id_follows_the_nodes_store(store: str, expected: tuple[str, str]) -> None:
    assert expected_image_id(store, CONFIG, PINNED) == expected


@pytest.mark.parametrize("store", ["classic", "containerd"])
def test_a_rank_running_the_release_passes_and_any_other_image_is_named(store: str) -> None:
    wanted = expected_image_id(store, CONFIG, PINNED)
    args = (LAYERS, {"org.kvbake.format": "1"}, {}, ("VLLM_X",), ())
    assert rank_failures("spark-a", container(wanted[0]), image(), *args, image_id=wanted) == []
    other = "sha256:" + "0" * 64
    assert rank_failures("spark-a", container(other), image(), *args, image_id=wanted) == [
        f"spark-a: the container runs image {other[:19]}, not the release's {wanted[1]} {wanted[0][:19]}"]
