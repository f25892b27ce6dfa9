"""Tests of the pure verification checks over image inspect data: every failure is collected at once."""

from __future__ import annotations

import pytest

from kvbake.errors import IntegrityError
from kvbake.bake.core.image_checks import Expectation, base_failures, env_names, file_failures, image_failures, platform_of, raise_if_failed

BASE = ("sha256:" + "a" * 64, "sha256:" + "b" * 64)
THIN = "sha256:" + "d" * 64
IMAGE_ID = "sha256:" + "e" * 64
MANIFEST_ID = "sha256:" + "7" * 64
LABELS = {"org.kvbake.format": "1", "org.kvbake.chain": "0001:abc", "org.opencontainers.image.title": "tiny"}
SWITCHES = ("TINY_BAD", "TINY_OTHER", "TINY_SWITCH")


def expectation(**changes) -> Expectation:
    values = dict(base_diff_ids=BASE, labels=LABELS, switch_names=SWITCHES, layer_diff_id=THIN, config_digest=IMAGE_ID)
    values.update(changes)
    return Expectation(**values)


def inspect(layers=(*BASE, THIN), labels=None, env=("PATH=/usr/bin", "LANG=C"), image=IMAGE_ID, config=None) -> dict:
    return {
        "Id": image, "ConfigDigest": image if config is None else config, "Os": "linux", "Architecture": "amd64",
        "RootFS": {"Type": "layers", "Layers": list(layers)},
        "Config": {"Env": list(env), "Labels": dict(LABELS if labels is None else labels)},
    }


def test_a_correct_image_has_no_failure() -> None:
    assert image_failures(inspect(), expectation()) == []


def test_extra_non_kvbake_labels_are_allowed() -> None:
    assert image_failures(inspect(labels={**LABELS, "maintainer": "base team"}), expectation()) == []


def test_every_failure_is_collected_at_once() -> None:
    bad = inspect(
        layers=("sha256:" + "f" * 64, BASE[1], THIN, "sha256:" + "9" * 64),
        labels={**LABELS, "org.kvbake.chain": "0001:zzz", "org.kvbake.extra": "x"},
        env=("PATH=/usr/bin", "TINY_SWITCH=3", "TINY_BAD=1"),
        image="sha256:" + "0" * 64,
    )
    failures = image_failures(bad, expectation())
    assert failures == [
        "the base layers are not a prefix of the image's layers",
        "expected exactly one new layer, found 2",
        "label org.kvbake.chain is '0001:zzz', expected '0001:abc'",
        "unexpected label org.kvbake.extra",
        "switch TINY_BAD is set in the image Env (every switch must default off)",
        "switch TINY_SWITCH is set in the image Env (every switch must default off)",
        f"config digest {'sha256:' + '0' * 12} is not the reproducible {IMAGE_ID[:19]}",
    ]


def test_on_the_containerd_store_the_id_is_the_predicted_manifest_digest_and_the_config_still_counts() -> None:
    containerd = expectation(store_id=MANIFEST_ID, id_meaning="manifest digest")
    assert image_failures(inspect(image=MANIFEST_ID, config=IMAGE_ID), containerd) == []
    assert image_failures(inspect(image=IMAGE_ID, config=IMAGE_ID), containerd) == [
        f"image ID {IMAGE_ID[:19]} is not the predicted manifest digest {MANIFEST_ID[:19]}"]
    assert image_failures(inspect(image=MANIFEST_ID, config="sha256:" + "0" * 64), containerd) == [
        f"config digest {'sha256:' + '0' * 12} is not the reproducible {IMAGE_ID[:19]}"]


def test_a_wrong_thin_layer_is_named() -> None:
    failures = image_failures(inspect(layers=(*BASE, "sha256:" + "9" * 64)), expectation())
    assert failures == [f"the new layer {'sha256:' + '9' * 12} is not the thin layer {THIN[:19]}"]


def test_no_new_layer_is_a_failure() -> None:
    assert image_failures(inspect(layers=BASE), expectation()) == ["expected exactly one new layer, found 0"]


def test_a_missing_label_is_a_failure() -> None:
    labels = {k: v for k, v in LABELS.items() if k != "org.opencontainers.image.title"}
    assert image_failures(inspect(labels=labels), expectation()) == ["label org.opencontainers.image.title is None, expected 'tiny'"]


def test_a_switch_name_that_only_prefixes_an_env_name_is_not_flagged() -> None:
    assert image_failures(inspect(env=("TINY_SWITCHES=1", "XTINY_BAD=1")), expectation()) == []


def test_empty_inspect_data_fails_every_check_without_crashing() -> None:
    failures = image_failures({}, expectation())
    assert "the base layers are not a prefix of the image's layers" in failures
    assert "expected exactly one new layer, found 0" in failures
    assert any(f.startswith("config digest None") for f in failures)


@pytest.mark.parametrize(("new", "ok"), [(0, False), (1, True), (2, True), (3, False)])
def test_the_docker_builder_allows_one_or_two_unknown_layers(new: int, ok: bool) -> None:
    layers = (*BASE, *("sha256:" + str(i) * 64 for i in range(new)))
    failures = image_failures(inspect(layers=layers, image="sha256:anything"), expectation(layer_diff_id=None, config_digest=None, max_new_layers=2))
    assert failures == ([] if ok else [f"expected 1 to 2 new layers, found {new}"])


def test_base_failures_is_empty_for_the_locked_base() -> None:
    data = {"Id": MANIFEST_ID, "ConfigDigest": "sha256:" + "c" * 64, "Os": "linux", "Architecture": "arm64", "RootFS": {"Layers": list(BASE)}}
    assert base_failures(data, "sha256:" + "c" * 64, BASE, "linux/arm64") == []
    assert platform_of(data) == "linux/arm64"


def test_base_failures_collects_id_layers_and_platform() -> None:
    data = {"Id": "sha256:" + "c" * 64, "ConfigDigest": "sha256:" + "0" * 64, "Os": "linux", "Architecture": "amd64", "RootFS": {"Layers": [BASE[0]]}}
    assert base_failures(data, "sha256:" + "c" * 64, BASE, "linux/arm64") == [
        f"config digest {'sha256:' + '0' * 12} differs from the lock's {'sha256:' + 'c' * 12}",
        "diff_ids differ from the lock (1 layers here, 2 locked)",
        "platform linux/amd64 differs from the lock's linux/arm64",
    ]


def test_file_failures_names_missing_and_changed_files() -> None:
    expected = {"pkg/a.py": "1" * 64, "pkg/b.py": "2" * 64, "pkg/c.py": "3" * 64}
    found = {"pkg/a.py": "1" * 64, "pkg/b.py": "9" * 64, "pkg/c.py": None}
    assert file_failures(found, expected) == [
        f"pkg/b.py has sha256 {'9' * 12}…, the lock says {'2' * 12}…",
        "pkg/c.py is missing from the image",
    ]
    assert file_failures(expected, expected) == []


def test_raise_if_failed_counts_and_joins_the_failures() -> None:
    raise_if_failed("image", [])
    with pytest.raises(IntegrityError) as caught:
        raise_if_failed("image kvbake-test/tiny:1", ["first", "second"])
    assert caught.value.exit_code == 7
    assert caught.value.one_line().startswith("image kvbake-test/tiny:1: 2 check(s) failed: first; second; fix:")


def test_env_names_takes_the_part_before_the_first_equals() -> None:
    assert env_names(["A=1", "B=x=y", "C"]) == {"A", "B", "C"}
    assert env_names(None) == set()
