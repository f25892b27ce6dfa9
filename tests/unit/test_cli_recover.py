"""`deploy --resume` and `deploy --revert` on the command line: each reaches the recovery it names, with the release it
names, and only --revert works on a deployment marked diverged (it is the repair)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbake import cli
from kvbake.ship import commands
from kvbake.ship.adapters import rollout
from kvbake.ship.core.journal import Journal, NodePlan
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.operate.core.presets import choose_preset
from kvbake.ship.core.push_record import pushed_image
from kvbake.ship.core.release import make_release

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin" / "manifest.yaml"
IMAGE = "127.0.0.1:5000/kvbake/standin-kvpack@sha256:" + "ab" * 32
JOURNAL = Journal("deploy-20260101T000000Z-abcdef", "deploy", "0123456789abcdef", (NodePlan("a", None, None, "sha256:x", None, {}, {}),))


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The ship context and the recovery, faked: what cmd_deploy asked of each."""
    manifest = load_manifest(STANDIN)
    lock = read_lock(manifest)
    seen: list[tuple] = []

    def ship_context(args, refuse_diverged=False):
        seen.append(("context", refuse_diverged))
        return manifest, lock, SimpleNamespace(nodes=()), SimpleNamespace(engines={"spark-a": None, "spark-b": None})

    def recover(fleet, mode, break_lock, release_id=None):
        seen.append(("recover", mode, break_lock, release_id))
        return JOURNAL

    monkeypatch.setattr(commands, "_ship_context", ship_context)
    monkeypatch.setattr(rollout, "recover", recover)
    monkeypatch.setattr(rollout, "deploy", lambda *a, **k: pytest.fail("a recovery must not start a new deploy"))
    return seen


def release_id(preset: str) -> str:
    manifest = load_manifest(STANDIN)
    return make_release(pushed_image(manifest, read_lock(manifest), IMAGE), choose_preset(manifest, preset), manifest, "", "op@host").id


@pytest.mark.parametrize(("argv", "expected", "text"), [
    (["--resume"], [("context", True), ("recover", "resume", False, None)], f"resumed deploy {JOURNAL.id} on 2 nodes"),
    (["--revert"], [("context", False), ("recover", "revert", False, None)], f"reverted deploy {JOURNAL.id} on 2 nodes"),
    (["--revert", "--break-lock"], [("context", False), ("recover", "revert", True, None)], f"reverted deploy {JOURNAL.id} on 2 nodes"),
    (["--resume", "--preset", "control", "--image", IMAGE], [("context", True), ("recover", "resume", False, release_id("control"))],
     f"resumed deploy {JOURNAL.id} on 2 nodes"),
    (["--revert", "--preset", "control", "--image", IMAGE], [("context", False), ("recover", "revert", False, None)],
     f"reverted deploy {JOURNAL.id} on 2 nodes"),
], ids=["resume", "revert", "revert-break-lock", "resume-checks-the-release", "revert-ignores-the-preset"])
def test_resume_and_revert_reach_their_own_recovery(calls, capsys, argv, expected, text):
    assert cli.main(["deploy", *argv]) == 0
    assert calls == expected
    assert capsys.readouterr().out == text + "\n"


def test_the_json_names_the_action(calls, capsys):
    assert cli.main(["deploy", "--revert", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"journal": JOURNAL.id, "action": "reverted"}
    assert cli.main(["deploy", "--resume", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"journal": JOURNAL.id, "action": "resumed"}
