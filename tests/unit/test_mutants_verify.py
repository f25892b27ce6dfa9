"""Exact-value tests of image_checks.py (was verify.py) that the mutation run showed were missing: empty inspect data, every message and fix."""

from __future__ import annotations

import pytest

from kvbake.errors import IntegrityError
from kvbake.bake.core.image_checks import (Expectation, base_failures, env_failures, file_failures, image_failures, label_failures, layer_failures,
                           platform_of, raise_if_failed)

BASE = ("sha256:" + "a" * 64, "sha256:" + "b" * 64)
THIN = "sha256:" + "d" * 64
CONFIG = "sha256:" + "c" * 64


def expectation(**changes) -> Expectation:
    values = dict(base_diff_ids=BASE, labels={"org.kvbake.format": "1"}, switch_names=("S1", "S2"), layer_diff_id=THIN, config_digest=CONFIG)
    values.update(changes)
    return Expectation(**values)


def test_an_expectation_defaults_to_one_new_layer_and_no_store_id() -> None:
    plain = expectation()
    assert (plain.max_new_layers, plain.store_id, plain.id_meaning) == (1, None, "config digest")


@pytest.mark.parametrize(("inspect", "failures"), [
    ({"ConfigDigest": CONFIG, "Os": "linux", "Architecture": "amd64"}, ["diff_ids differ from the lock (0 layers here, 2 locked)"]),
    ({"ConfigDigest": CONFIG, "Os": "linux", "Architecture": "amd64", "RootFS": {}}, ["diff_ids differ from the lock (0 layers here, 2 locked)"]),
    ({"ConfigDigest": CONFIG, "Os": "linux", "Architecture": "amd64", "RootFS": {"Layers": list(reversed(BASE))}},
     ["diff_ids differ from the lock (2 layers here, 2 locked)"]),
    ({}, [f"config digest None differs from the lock's {CONFIG[:19]}", "diff_ids differ from the lock (0 layers here, 2 locked)",
          "platform None/None differs from the lock's linux/amd64"]),
])
def test_base_failures_read_missing_inspect_fields_as_empty(inspect: dict, failures: list[str]) -> None:
    assert base_failures(inspect, CONFIG, BASE, "linux/amd64") == failures


def test_platform_of_joins_os_and_architecture() -> None:
    assert platform_of({"Os": "linux", "Architecture": "arm64", "Variant": "v8"}) == "linux/arm64"


@pytest.mark.parametrize(("layers", "failures"), [
    ([*BASE, THIN], []),
    (list(BASE), ["expected exactly one new layer, found 0"]),
    ([BASE[1], BASE[0], THIN], ["the base layers are not a prefix of the image's layers"]),
    ([*BASE, BASE[0]], [f"the new layer {BASE[0][:19]} is not the thin layer {THIN[:19]}"]),
    ([BASE[0], THIN], ["the base layers are not a prefix of the image's layers", "expected exactly one new layer, found 0"]),
    ([], ["the base layers are not a prefix of the image's layers", "expected exactly one new layer, found 0"]),
])
def test_layer_failures_with_a_known_thin_layer(layers: list[str], failures: list[str]) -> None:
    assert layer_failures(layers, expectation()) == failures


@pytest.mark.parametrize(("new", "failures"), [
    (0, ["expected 1 to 3 new layers, found 0"]), (1, []), (3, []), (4, ["expected 1 to 3 new layers, found 4"]),
])
def test_layer_failures_for_the_docker_builder(new: int, failures: list[str]) -> None:
    layers = [*BASE, *(f"sha256:{i}" for i in range(new))]
    assert layer_failures(layers, expectation(layer_diff_id=None, max_new_layers=3)) == failures


@pytest.mark.parametrize(("labels", "failures"), [
    (None, ["label org.kvbake.a is None, expected '1'", "label org.kvbake.b is None, expected '2'"]),
    ({"org.kvbake.a": "1", "org.kvbake.b": "2", "org.other": "x", "kvbake.z": "y"}, []),
    ({"org.kvbake.b": "3", "org.kvbake.a": "1", "org.kvbake.zz": "", "org.kvbake.c": "x"},
     ["label org.kvbake.b is '3', expected '2'", "unexpected label org.kvbake.c", "unexpected label org.kvbake.zz"]),
])
def test_label_failures_name_wrong_missing_and_unexpected_labels(labels, failures: list[str]) -> None:
    assert label_failures(labels, {"org.kvbake.b": "2", "org.kvbake.a": "1"}) == failures


@pytest.mark.parametrize(("env", "failures"), [
    (None, []),
    (["S2=1", "PATH=/bin", "S1", "S3=1"], ["switch S1 is set in the image Env (every switch must default off)",
                                           "switch S2 is set in the image Env (every switch must default off)"]),
])
def test_env_failures_flag_every_switch_set_in_the_image(env, failures: list[str]) -> None:
    assert env_failures(env, ("S2", "S1")) == failures


def test_image_failures_of_an_image_without_config_or_rootfs() -> None:
    assert image_failures({"ConfigDigest": CONFIG}, expectation(store_id="sha256:m", id_meaning="manifest digest")) == [
        "the base layers are not a prefix of the image's layers", "expected exactly one new layer, found 0",
        "label org.kvbake.format is None, expected '1'", "image ID None is not the predicted manifest digest sha256:m"]
    assert image_failures({"Config": None, "ConfigDigest": CONFIG, "RootFS": {"Layers": [*BASE, THIN]}},
                          expectation(labels={})) == []


def test_file_failures_in_path_order() -> None:
    assert file_failures({}, {"z.py": "1" * 64, "a.py": "2" * 64}) == ["a.py is missing from the image", "z.py is missing from the image"]


def test_raise_if_failed_gives_the_count_the_failures_and_the_fix() -> None:
    assert raise_if_failed("image x", []) is None
    with pytest.raises(IntegrityError) as caught:
        raise_if_failed("image x", ["first"])
    assert type(caught.value) is IntegrityError
    assert (caught.value.message, caught.value.fix) == ("image x: 1 check(s) failed: first", "do not use this image; rebuild it with python build.py")
