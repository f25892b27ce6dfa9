"""Tests of the pure rank checks: the image a rank runs is the release's, by the identity its node's store uses."""

from __future__ import annotations

import pytest

from kvbake.ship.core.running import expected_image_id, rank_failures

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
    args = (LAYERS, {"org.kvbake.format": "1"}, ())
    assert rank_failures("spark-a", container(wanted[0]), image(), *args, image_id=wanted) == []
    other = "sha256:" + "0" * 64
    assert rank_failures("spark-a", container(other), image(), *args, image_id=wanted) == [
        f"spark-a: the container runs image {other[:19]}, not the release's {wanted[1]} {wanted[0][:19]}"]


ROOT = "/usr/local/lib/python3.11/dist-packages"


@pytest.mark.parametrize(("env", "image_env", "flagged"), [
    (("PYTHONPATH=/work/patched",), (), "PYTHONPATH is set to '/work/patched' in the container, not as the image sets it ('unset')"),
    (("LD_PRELOAD=/x.so",), (), "LD_PRELOAD is set"),
    (("VLLM_PLUGINS=evil",), (), "VLLM_PLUGINS is set"),
    (("LD_LIBRARY_PATH=/other",), ("LD_LIBRARY_PATH=/usr/local/cuda/lib64",), "LD_LIBRARY_PATH is set to '/other'"),
])
def test_code_selecting_variables_are_flagged_unless_the_image_sets_them_the_same(env, image_env, flagged) -> None:
    from kvbake.ship.core.running import override_failures

    failures = override_failures(env, image_env, [], ROOT)
    assert len(failures) == 1 and failures[0].startswith(flagged)
    assert override_failures(image_env, image_env, [], ROOT) == []


@pytest.mark.parametrize(("destination", "where"), [
    (ROOT, "over or above"), ("/usr/local/lib", "over or above"), ("/usr", "over or above"),
    (ROOT + "/vllm/v1/attention", "inside"),
])
def test_mounts_over_above_or_inside_the_source_root_are_flagged(destination: str, where: str) -> None:
    from kvbake.ship.core.running import override_failures

    assert override_failures((), (), [{"Type": "bind", "Destination": destination}], ROOT) == [
        f"a bind mount at {destination} is {where} the source root {ROOT}"]
    assert override_failures((), (), [{"Type": "volume", "Destination": "/models"}], ROOT) == []


def test_a_rank_with_a_mount_inside_the_source_root_fails_even_away_from_baked_files() -> None:
    baked = (ROOT + "/vllm/v1/kv_cache_interface.py",)
    wanted = expected_image_id("classic", CONFIG, PINNED)
    mounted = container(CONFIG, mounts=[{"Type": "bind", "Destination": ROOT + "/vllm/v1/attention"}])
    failures = rank_failures("spark-a", mounted, image(), LAYERS, {"org.kvbake.format": "1"}, baked, wanted, ROOT)
    assert failures == [f"spark-a: a bind mount at {ROOT}/vllm/v1/attention is inside the source root {ROOT}"]
    over = container(CONFIG, mounts=[{"Type": "bind", "Destination": ROOT}])
    failures = rank_failures("spark-a", over, image(), LAYERS, {"org.kvbake.format": "1"}, baked, wanted, ROOT)
    assert failures == [f"spark-a: a bind mount at {ROOT} covers baked file {baked[0]}"]
