"""Exact-value tests of running.py that the mutation run showed were missing: every branch and message of the rank checks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvbake.errors import PresetError
from kvbake.ship.core.create_spec import create_spec
from kvbake.ship.core.running import (adopted_rank_failures, agreement_failures, expected_image_id, mount_failures, override_failures,
                            parse_expect, rank_failures, switch_env)

ROOT = "/usr/local/lib/python3.11/dist-packages"
BAKED = (ROOT + "/vllm/v1/kv_cache_interface.py", ROOT + "/vllm/config.py")
CONFIG = "sha256:" + "c" * 64
MANIFEST = "sha256:" + "m" * 64
LAYERS = ("sha256:" + "1" * 64, "sha256:" + "2" * 64)
LABELS = {"org.kvbake.format": "1", "org.kvbake.chain": "p1 p2"}
NAMES = ("VLLM_A", "VLLM_B", "VLLM_FORBIDDEN")


# --- parse_expect -----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "parsed"), [
    ("", {}),
    (" , ,", {}),
    ("VLLM_A=1", {"VLLM_A": "1"}),
    (" VLLM_A=1 , VLLM_B=on ,", {"VLLM_A": "1", "VLLM_B": "on"}),
    ("VLLM_A=x=y", {"VLLM_A": "x=y"}),
    ("VLLM_A=1,VLLM_A=2", {"VLLM_A": "2"}),
])
def test_parse_expect_reads_name_value_items(text: str, parsed: dict[str, str]) -> None:
    assert parse_expect(text) == parsed


@pytest.mark.parametrize("item", ["VLLM_A", "=1", "VLLM_A="])
def test_parse_expect_refuses_an_item_that_is_not_name_value(item: str) -> None:
    with pytest.raises(PresetError) as caught:
        parse_expect(f"VLLM_B=1,{item}")
    assert type(caught.value) is PresetError
    assert caught.value.exit_code == 14
    assert f"--expect item {item!r}" in caught.value.message
    assert "--expect" in caught.value.fix


# --- switch_env -------------------------------------------------------------------------------

@pytest.mark.parametrize(("env", "found"), [
    (None, {}),
    ([], {}),
    (["PATH=/usr/bin", "VLLM_A=1"], {"VLLM_A": "1"}),
    (["VLLM_A=x=y", "VLLM_B="], {"VLLM_A": "x=y", "VLLM_B": ""}),
    (["VLLM_B", "VLLM_AX=1"], {"VLLM_B": ""}),
])
def test_switch_env_keeps_only_the_named_switches_with_their_whole_values(env, found) -> None:
    assert switch_env(env, NAMES) == found


# --- mount_failures ---------------------------------------------------------------------------

@pytest.mark.parametrize(("mounts", "failures"), [
    (None, []),
    ([], []),
    ([{"Type": "volume", "Destination": "/models"}], []),
    # a mount over the file itself
    ([{"Type": "bind", "Destination": BAKED[1]}], [f"a bind mount at {BAKED[1]} covers baked file {BAKED[1]}"]),
    # a mount over a parent directory of a baked file
    ([{"Type": "bind", "Destination": ROOT + "/vllm/v1"}], [f"a bind mount at {ROOT}/vllm/v1 covers baked file {BAKED[0]}"]),
    ([{"Type": "bind", "Destination": ROOT + "/vllm/"}], [f"a bind mount at {ROOT}/vllm covers baked file {BAKED[0]}"]),
    ([{"Type": "tmpfs", "Destination": "/"}], [f"a tmpfs mount at / covers baked file {BAKED[0]}"]),
    # no type is read as a bind mount, no destination as the root
    ([{"Destination": ROOT}], [f"a bind mount at {ROOT} covers baked file {BAKED[0]}"]),
    ([{"Type": "bind"}], [f"a bind mount at / covers baked file {BAKED[0]}"]),
    # a sibling whose name only starts like the baked folder covers nothing
    ([{"Type": "bind", "Destination": ROOT + "/vllm/v"}], []),
    ([{"Type": "bind", "Destination": ROOT + "/vllm/config.p"}], []),
    # a destination whose last letter is X keeps it
    ([{"Type": "bind", "Destination": ROOT + "/vllm/X"}], []),
    ([{"Type": "bind", "Destination": "/models"}, {"Type": "bind", "Destination": BAKED[0]}],
     [f"a bind mount at {BAKED[0]} covers baked file {BAKED[0]}"]),
])
def test_mount_failures_name_the_first_baked_file_each_mount_covers(mounts, failures) -> None:
    assert mount_failures(mounts, BAKED) == failures


# --- override_failures ------------------------------------------------------------------------

@pytest.mark.parametrize(("env", "image_env", "failures"), [
    (None, None, []),
    (["PYTHONPATH=/opt/x"], ["PYTHONPATH=/opt/x"], []),
    (["PYTHONPATH=/opt/x=y"], ["PYTHONPATH=/opt/x=y"], []),
    (["PATH=/other", "VLLM_A=1"], ["PATH=/usr/bin"], []),
    (["PYTHONPATH=/opt/x"], None, ["PYTHONPATH is set to '/opt/x' in the container, not as the image sets it ('unset')"]),
    (["PYTHONPATH=/opt/x"], ["PYTHONPATH=/opt/y", "HOME=/root"],
     ["PYTHONPATH is set to '/opt/x' in the container, not as the image sets it ('/opt/y')"]),
    (["LD_PRELOAD=a=b"], ["LD_PRELOAD=a"], ["LD_PRELOAD is set to 'a=b' in the container, not as the image sets it ('a')"]),
    (["PYTHONHOME=/h", "VLLM_PLUGINS=p"], [], [
        "PYTHONHOME is set to '/h' in the container, not as the image sets it ('unset')",
        "VLLM_PLUGINS is set to 'p' in the container, not as the image sets it ('unset')"]),
])
def test_override_failures_compare_code_selecting_variables_with_the_image(env, image_env, failures) -> None:
    assert override_failures(env, image_env, None, ROOT) == failures


@pytest.mark.parametrize(("destination", "failures"), [
    ("/", [f"a bind mount at / is over or above the source root {ROOT}"]),
    ("/usr/local/", [f"a bind mount at /usr/local is over or above the source root {ROOT}"]),
    (ROOT + "/", [f"a bind mount at {ROOT} is over or above the source root {ROOT}"]),
    (ROOT + "/vllm", [f"a bind mount at {ROOT}/vllm is inside the source root {ROOT}"]),
    ("/usr/local/lib/python3", []),
    (ROOT + "-extra", []),
    ("/models", []),
])
def test_override_failures_place_each_mount_against_the_source_root(destination: str, failures: list[str]) -> None:
    mounts = [{"Type": "bind", "Destination": destination}]
    assert override_failures([], [], mounts, ROOT) == failures
    assert override_failures([], [], mounts, ROOT + "/") == failures


@pytest.mark.parametrize(("root", "destination", "failures"), [
    ("/srv/X", "/srv/X/", ["a bind mount at /srv/X is over or above the source root /srv/X"]),
    ("/srv/X/", "/srv/X/pkg", ["a bind mount at /srv/X/pkg is inside the source root /srv/X"]),
    ("/srv/lib", "/srv/X", []),
    ("/srv/lib", "/srv/X/", []),
])
def test_override_failures_strip_only_slashes(root: str, destination: str, failures: list[str]) -> None:
    assert override_failures([], [], [{"Type": "bind", "Destination": destination}], root) == failures


def test_override_failures_read_an_untyped_mount_as_bind_and_a_missing_destination_as_root() -> None:
    assert override_failures([], [], [{"Destination": ROOT + "/vllm"}, {"Type": "volume"}], ROOT) == [
        f"a bind mount at {ROOT}/vllm is inside the source root {ROOT}",
        f"a volume mount at / is over or above the source root {ROOT}"]


# --- expected_image_id ------------------------------------------------------------------------

@pytest.mark.parametrize(("store", "pinned", "expected"), [
    ("containerd", "127.0.0.1:5000/kvbake/x@" + MANIFEST, (MANIFEST, "manifest digest")),
    ("containerd", "user@host/kvbake/x@" + MANIFEST, (MANIFEST, "manifest digest")),
    ("classic", "127.0.0.1:5000/kvbake/x@" + MANIFEST, (CONFIG, "config digest")),
    ("overlay2", "r@" + MANIFEST, (CONFIG, "config digest")),
])
def test_expected_image_id_takes_the_digest_after_the_last_at_sign(store, pinned, expected) -> None:
    assert expected_image_id(store, CONFIG, pinned) == expected


# --- rank_failures ----------------------------------------------------------------------------

def serving(image_id: str = CONFIG, env=(), running: bool | None = True, mounts=()) -> dict:
    document = {"Image": image_id, "Config": {"Env": list(env)}, "Mounts": list(mounts)}
    if running is not None:
        document["State"] = {"Running": running}
    return document


def release_image(layers=LAYERS, labels=LABELS) -> dict:
    return {"RootFS": {"Layers": list(layers)}, "Config": {"Labels": dict(labels), "Env": ["PYTHONPATH=/baked"]}}


def failures_of(container, image, image_id=(CONFIG, "config digest"), source_root=None) -> list[str]:
    return rank_failures("n1", container, image, LAYERS, LABELS, BAKED, image_id, source_root)


def test_a_rank_that_runs_the_release_exactly_has_no_failure() -> None:
    assert failures_of(serving(env=["VLLM_A=1"]), release_image()) == []
    assert failures_of(serving(env=["VLLM_A=1", "PYTHONPATH=/baked"]), release_image(), source_root=ROOT) == []
    assert failures_of(serving(image_id="anything"), release_image(), image_id=None) == []


def test_a_missing_container_is_the_only_failure() -> None:
    assert failures_of(None, release_image()) == ["n1: the serving container is not there"]
    assert failures_of(None, None, image_id=None) == ["n1: the serving container is not there"]


@pytest.mark.parametrize("running", [False, None])
def test_a_stopped_or_stateless_container_is_not_running(running) -> None:
    assert failures_of(serving(running=running), release_image()) == ["n1: the serving container is not running"]


def test_a_container_whose_state_is_null_is_not_running() -> None:
    container = serving()
    container["State"] = None
    assert failures_of(container, release_image()) == ["n1: the serving container is not running"]


def test_another_image_is_named_with_the_meaning_of_the_expected_id() -> None:
    other = "sha256:" + "0" * 64
    assert failures_of(serving(image_id=other), release_image(), image_id=(MANIFEST, "manifest digest")) == [
        f"n1: the container runs image {other[:19]}, not the release's manifest digest {MANIFEST[:19]}"]


@pytest.mark.parametrize("image", [
    None,
    {"Config": {"Labels": LABELS}},
    {"RootFS": {}, "Config": {"Labels": LABELS}},
    {"RootFS": {"Layers": list(LAYERS[:1])}, "Config": {"Labels": LABELS}},
    {"RootFS": {"Layers": [*LAYERS, "sha256:" + "3" * 64]}, "Config": {"Labels": LABELS}},
    {"RootFS": {"Layers": list(reversed(LAYERS))}, "Config": {"Labels": LABELS}},
])
def test_other_layers_are_one_failure(image) -> None:
    failures = failures_of(serving(), image)
    assert failures[0] == "n1: the running image's layers differ from the release"
    labels_missing = ["n1: label org.kvbake.chain differs", "n1: label org.kvbake.format differs"]
    assert failures[1:] == (labels_missing if image is None else [])


@pytest.mark.parametrize(("config", "failures"), [
    (None, ["n1: label org.kvbake.chain differs", "n1: label org.kvbake.format differs"]),
    ({"Labels": None}, ["n1: label org.kvbake.chain differs", "n1: label org.kvbake.format differs"]),
    ({"Labels": {"org.kvbake.format": "1"}}, ["n1: label org.kvbake.chain differs"]),
    ({"Labels": {"org.kvbake.format": "2", "org.kvbake.chain": "p1 p2"}}, ["n1: label org.kvbake.format differs"]),
    ({"Labels": {**LABELS, "org.other": "x"}}, ["n1: label org.other differs"]),  # compared exactly: one more is a difference
])
def test_every_label_that_differs_is_named_in_order(config, failures) -> None:
    image = {"RootFS": {"Layers": list(LAYERS)}, "Config": config}
    assert failures_of(serving(), image) == failures


def test_a_mount_over_a_parent_of_a_baked_file_is_flagged_once() -> None:
    over_parent = serving(mounts=[{"Type": "bind", "Destination": ROOT + "/vllm"}])
    expected = [f"n1: a bind mount at {ROOT}/vllm covers baked file {BAKED[0]}"]
    assert failures_of(over_parent, release_image()) == expected
    assert failures_of(over_parent, release_image(), source_root=ROOT) == expected


def test_code_overrides_are_checked_against_the_image_env_only_with_a_source_root() -> None:
    container = serving(env=["PYTHONPATH=/elsewhere"], mounts=[{"Type": "bind", "Destination": ROOT + "/other"}])
    assert failures_of(container, release_image()) == []
    assert failures_of(container, release_image(), source_root=ROOT) == [
        "n1: PYTHONPATH is set to '/elsewhere' in the container, not as the image sets it ('/baked')",
        f"n1: a bind mount at {ROOT}/other is inside the source root {ROOT}"]
    assert failures_of(container, None, source_root=ROOT)[-2:] == [
        "n1: PYTHONPATH is set to '/elsewhere' in the container, not as the image sets it ('unset')",
        f"n1: a bind mount at {ROOT}/other is inside the source root {ROOT}"]


def test_a_container_without_mounts_has_no_mount_failure() -> None:
    container = serving()
    del container["Mounts"]
    assert failures_of(container, release_image(), source_root=ROOT) == []


# --- agreement_failures -----------------------------------------------------------------------

SERVE = ((("VLLM_A", "1"),), "/models/m", (("--max-model-len", ("4096",)),))
SAME = (LAYERS, (SERVE,))


@pytest.mark.parametrize(("observed", "failures"), [
    ({}, []),
    ({"n1": SAME}, []),
    ({"n1": SAME, "n2": SAME, "n3": SAME}, []),
    ({"n2": (LAYERS, (((), "/models/m", SERVE[2]),)), "n1": SAME}, [
        "the ranks disagree: n1 runs 2 layers with {'VLLM_A': '1'}, 1 arguments; n2 runs 2 layers with no switches, 1 arguments"]),
    ({"n1": SAME, "n2": (LAYERS[:1], (SERVE,))}, [
        "the ranks disagree: n1 runs 2 layers with {'VLLM_A': '1'}, 1 arguments; n2 runs 1 layers with {'VLLM_A': '1'}, 1 arguments"]),
    ({"n1": SAME, "n2": (LAYERS, (SERVE[:2] + ((("--max-model-len", ("8192",)), ("--enforce-eager", ())),),))}, [
        "the ranks disagree: n1 runs 2 layers with {'VLLM_A': '1'}, 1 arguments; n2 runs 2 layers with {'VLLM_A': '1'}, 2 arguments"]),
    ({"n1": SAME, "n2": (LAYERS, ())}, ["the ranks disagree: n1 runs 2 layers with {'VLLM_A': '1'}, 1 arguments; n2 runs 2 layers with no vLLM serve"]),
])
def test_all_ranks_must_agree(observed, failures) -> None:
    assert agreement_failures(observed) == failures


# --- adopted_rank_failures --------------------------------------------------------------------

def adopted_release():
    return SimpleNamespace(adopted={"container_id": "c" * 64}, layers=LAYERS, switches={"VLLM_A": "1"})


def adopted_container(container_id: str = "c" * 64, env=("VLLM_A=1",), running: bool = True) -> dict:
    return {"Id": container_id, "State": {"Running": running}, "Config": {"Env": list(env)}, "Mounts": [{"Destination": ROOT}]}


def test_the_adopted_serve_running_as_it_was_passes_whatever_it_mounts() -> None:
    assert adopted_rank_failures("n1", adopted_container(), release_image(), adopted_release()) == []


@pytest.mark.parametrize(("container", "image", "failures"), [
    (None, release_image(), ["n1: the adopted serving container is not there"]),
    (adopted_container(container_id="d" * 64), release_image(), [f"n1: the serving container is {'d' * 12}, not the adopted {'c' * 12}"]),
    ({"Id": "c" * 64}, {"RootFS": {"Layers": list(LAYERS)}}, ["n1: the adopted serving container is not running"]),
    (adopted_container(running=False), release_image(), ["n1: the adopted serving container is not running"]),
    (adopted_container(), None, ["n1: the running image's layers differ from the adopted serve's"]),
    (adopted_container(), {}, ["n1: the running image's layers differ from the adopted serve's"]),
    (adopted_container(), {"RootFS": {}}, ["n1: the running image's layers differ from the adopted serve's"]),
])
def test_every_way_the_adopted_serve_changed_is_named(container, image, failures: list[str]) -> None:
    assert adopted_rank_failures("n1", container, image, adopted_release()) == failures


def test_another_container_than_the_adopted_one_or_its_recreation_is_named_as_neither() -> None:
    release = adopted_release()
    release.adopted["spec"] = create_spec(adopted_container())
    other = adopted_container(container_id="d" * 64, env=("VLLM_A=1", "OTHER=1"))
    failures = adopted_rank_failures("n1", other, release_image(), release)
    assert failures[:1] == [f"n1: the serving container is {'d' * 12}, not the adopted {'c' * 12} nor one recreated from its spec"]
    assert adopted_rank_failures("n1", adopted_container(container_id="e" * 64), release_image(), release) == []
