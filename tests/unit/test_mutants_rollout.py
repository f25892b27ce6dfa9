"""The pending-journal refusal of rollout.py: a journal left on this host stops every new transition, nodes untouched."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kvbake.ship.adapters import rollout
from kvbake.deployfile import Deployment, Launcher, Node
from kvbake.errors import DivergedError, RolloutError
from kvbake.ship.core.journal import Journal, NodePlan, mark_diverged, write_journal
from kvbake.ship.core.release import Release
from kvbake.ship.adapters.fleet import Fleet

from fake_engine import FakeEngine

REPO = "reg:5000/kvbake/x"
DIGEST = "sha256:" + hashlib.sha256(b"packing").hexdigest()
PACKING = Release(image=f"{REPO}@{DIGEST}", config_digest=DIGEST, layers=("sha256:base", "sha256:thin"), labels={}, preset="packing",
                  switches={}, max_model_len=4096, launcher_args=(), deployed_by="ops", deployed_at="t", reason="r", override=None)


@pytest.fixture()
def fleet(tmp_path: Path) -> Fleet:
    engines = {"a": FakeEngine("a")}
    deployment = Deployment(tmp_path / "deploy.yaml", (Node("a", "unix:///a", "head"),), Launcher(("launch",), "serve", 10), 900)
    return Fleet(deployment, engines, REPO, ("S",), ("/src/x.py",), "/src")


def untouched(fleet: Fleet) -> bool:
    engine = fleet.engines["a"]
    return (engine.tags, engine.containers, engine.images) == ({}, {}, {})


@pytest.mark.parametrize("start", [
    lambda f: rollout.deploy(f, PACKING, "base:1", ("sha256:base",), False),
    lambda f: rollout.rollback(f, False),
], ids=["deploy", "rollback"])
def test_a_journal_left_on_this_host_refuses_a_new_transition(fleet: Fleet, start) -> None:
    write_journal(fleet.deployment.state_dir, Journal("deploy-7", "deploy", "rel-9", (NodePlan("a", None, None, "x", None, {}, {}),)))
    with pytest.raises(RolloutError) as caught:
        start(fleet)
    assert type(caught.value) is RolloutError
    assert (caught.value.message, caught.value.fix) == ("an interrupted deploy (deploy-7, release rel-9) left a journal",
                                                        "run deploy --resume to finish it or deploy --revert to undo it")
    assert untouched(fleet)


def test_a_diverged_mark_is_refused_before_the_journal(fleet: Fleet) -> None:
    folder = fleet.deployment.state_dir
    write_journal(folder, Journal("deploy-7", "deploy", "rel-9", (NodePlan("a", None, None, "x", None, {}, {}),)))
    mark_diverged(folder, {"revert_error": "b down", "repair": "python build.py deploy --revert"})
    with pytest.raises(DivergedError) as caught:
        rollout.refuse_pending(fleet.deployment)
    assert (caught.value.message, caught.value.fix) == ("the deployment is marked diverged (b down)", "repair first: python build.py deploy --revert")


def test_no_journal_and_no_mark_lets_a_transition_start(fleet: Fleet) -> None:
    assert rollout.refuse_pending(fleet.deployment) is None
