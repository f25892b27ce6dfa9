"""init's report: the drafter's limit, the privileged nodes' launch settings, and the served files with their hashes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbake.bake.core.served_overlay import ServedFile, ServedOverlay
from kvbake.ship.commands import init_report
from message_words import says

SERVED = "a1" * 32
IMAGE = "b2" * 32
RECORD = Path("/project/.kvbake/served/record.json")
LAUNCH = {"devices": ["/dev/infiniband/uverbs0"], "cap_add": ["IPC_LOCK"], "ulimits": {"memlock": -1}}


def result(drafter=None, privileged=(), node_launch=None, files=()) -> SimpleNamespace:
    """What init found on a one-node serve, as its report reads it."""
    described = SimpleNamespace(base=SimpleNamespace(image="base:1", by_digest=True), max_model_len=4096, launcher_args=(), switches={},
                                changes={}, overrides=(), drafter=drafter, secrets=(), ray_secrets=(), privileged=privileged, node_launch=node_launch or {})
    return SimpleNamespace(described=described, nodes=(), implied=None, written=(Path("manifest.yaml"),), left=(), captured=False,
                           served=ServedOverlay("/src", "sha256:image", tuple(files)), served_record=RECORD, ties=())


def drafter(served_positions: int | None, limit: int | None) -> SimpleNamespace:
    return SimpleNamespace(url="http://drafter:8001", option="--speculative-config", served_positions=served_positions, limit=limit)


def line_of(text: str, start: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(start))


@pytest.mark.parametrize(("served_positions", "limit", "shown"), [(8192, 2048, "8192"), (None, 2048, "2048"), (None, None, "4096")],
                         ids=["answered", "limit-given", "serve-limit"])
def test_the_drafter_line_names_the_positions_it_serves_else_the_limit_taken(served_positions, limit, shown) -> None:
    _, text = init_report(result(drafter=drafter(served_positions, limit)))
    line = line_of(text, "drafter: http://drafter:8001")
    numbers = {"8192", "2048", "4096", "None"} - {shown}
    assert shown in line and not any(number in line for number in numbers)


def test_a_privileged_node_is_reported_with_the_launch_settings_its_serve_gets() -> None:
    data, text = init_report(result(privileged=("spark-a",), node_launch={"spark-a": LAUNCH}))
    assert data["privileged"] == {"spark-a": LAUNCH}
    line = line_of(text, "spark-a: --privileged")
    assert "/dev/infiniband/uverbs0" in line and "IPC_LOCK" in line and "memlock=-1" in line


def test_a_privileged_node_without_launch_settings_reports_none_of_them() -> None:
    data, text = init_report(result(privileged=("spark-a",)))
    assert data["privileged"] == {"spark-a": {"devices": None, "cap_add": None, "ulimits": None}}
    assert line_of(text, "spark-a: --privileged")


def test_each_served_file_is_reported_with_its_hash_and_the_image_s_and_the_record_is_named() -> None:
    files = (ServedFile("vllm/a.py", SERVED, IMAGE, "mounted from /home/ops/a.py"), ServedFile("vllm/new.py", SERVED, None, "changed"))
    data, text = init_report(result(files=files))
    assert data["served"] == [{"path": "vllm/a.py", "sha256": SERVED, "base_sha256": IMAGE, "how": "mounted from /home/ops/a.py"},
                              {"path": "vllm/new.py", "sha256": SERVED, "base_sha256": None, "how": "changed"}]
    assert data["served_record"] == str(RECORD)
    line = line_of(text, "served: vllm/a.py ")
    assert f"sha256 {SERVED[:16]}… (image {IMAGE[:16]}…)" in line
    assert IMAGE[:16] not in line_of(text, "served: vllm/new.py ")
    assert str(RECORD) in text


def test_init_names_each_tie_to_a_launcher_and_where_the_runbook_says_how_to_retire_it():
    tied = result()
    tied.ties = ("a: node-23127 was started by `docker run` in the foreground",)
    data, text = init_report(tied)
    assert data["launcher_ties"] == list(tied.ties)
    line = next(line for line in text.splitlines() if line.startswith("tied to its launcher: "))
    assert says(line, "node-23127 was started by `docker run` in the foreground") and says(line, "Retire your launcher")
    assert "tied to its launcher" not in init_report(result())[1]
