"""Tests of the store-change check: a node whose image store changed since the last deploy must be reseated."""

from __future__ import annotations

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.core.store_changes import check_store_changes, read_stores, remember_stores, store_changes
from kvbake.engines.core.detection import EngineProfile

CLASSIC = EngineProfile("26.1.5", "classic", "overlay2")
CONTAINERD = EngineProfile("26.1.5", "containerd", "overlayfs")
NEWER_CLASSIC = EngineProfile("27.3.1", "classic", "overlay2")


def test_stores_round_trip_and_a_store_switch_is_a_change_but_an_upgrade_is_not(tmp_path):
    remember_stores(tmp_path, {"a": CLASSIC, "b": CLASSIC})
    recorded = read_stores(tmp_path)
    assert recorded == {"a": {"name": "docker-26.1-classic", "store": "classic"}, "b": {"name": "docker-26.1-classic", "store": "classic"}}
    assert store_changes(recorded, {"a": NEWER_CLASSIC, "b": CONTAINERD}) == {"b": ("docker-26.1-classic", "docker-26.1-containerd")}
    assert store_changes({}, {"a": CONTAINERD}) == {}


def test_a_changed_node_needs_reseat_and_reseat_needs_a_change():
    changes = {"b": ("docker-26.1-classic", "docker-26.1-containerd")}
    with pytest.raises(RolloutError, match=r"node b ran docker-26.1-classic at the last deploy and runs docker-26.1-containerd now") as refused:
        check_store_changes(changes, set())
    assert "deploy with --reseat b" in refused.value.fix
    check_store_changes(changes, {"b"})
    with pytest.raises(RolloutError, match=r"--reseat a: that node's image store did not change"):
        check_store_changes(changes, {"a", "b"})


def test_a_damaged_record_is_a_typed_error(tmp_path):
    (tmp_path / "engines.json").write_text("{not json")
    with pytest.raises(RolloutError, match="engines.json in .* is damaged") as refused:
        read_stores(tmp_path)
    assert refused.value.fix.startswith("delete engines.json")
