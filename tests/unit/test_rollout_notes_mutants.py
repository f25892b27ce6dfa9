"""The lock refusal's note on the holder's journal, and the refusal of a transition another host settled: what each adds."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbake.errors import RolloutError
from kvbake.ship.adapters.rollout import journal_note, settled_elsewhere
from kvbake.ship.core.journal import Journal, NodePlan, read_journal, write_journal
from kvbake.ship.core.lock_claims import LockClaim
from message_words import says

CLAIM = LockClaim(token="t0k3n", owner="ops@h1:4242", machine="m1", deploy="deploy-1", since=0.0)


class NodeKeeping:
    """A node's state whose records keep `transition` (a journal's plain form, or None)."""

    def __init__(self, transition: dict | None) -> None:
        self.transition = transition

    def read(self) -> SimpleNamespace:
        return SimpleNamespace(transition=self.transition)


class Unreadable:
    def read(self) -> SimpleNamespace:
        raise RolloutError("node a: its records are corrupt", "repair the state container")


def test_the_holders_journal_on_the_node_adds_how_to_finish_or_undo_it():
    note = journal_note(NodeKeeping({"id": "deploy-1"}), CLAIM)
    assert says(note, "deploy --resume") and says(note, "deploy --revert with --break-lock")


@pytest.mark.parametrize("state", [NodeKeeping(None), NodeKeeping({"id": "deploy-2"}), NodeKeeping({}), Unreadable()],
                         ids=["no journal", "another transition's journal", "a journal without an id", "unreadable records"])
def test_a_node_without_the_holders_journal_adds_nothing_to_the_refusal(state):
    assert journal_note(state, CLAIM) == ""


def test_a_claim_without_a_deploy_matches_no_journal():
    assert journal_note(NodeKeeping({}), LockClaim("t", "ops@h1:1", "m1", "", 0.0)) == ""


JOURNAL = Journal("deploy-9", "deploy", "r2", (NodePlan("a", None, None, "x", None, {}, {}),), done=("after:retag:a",), phase="forward")


def refusal(folder: Path, local: bool) -> RolloutError:
    with pytest.raises(RolloutError) as caught:
        settled_elsewhere(folder, JOURNAL, local, "resume")
    return caught.value


def test_a_transition_settled_from_another_host_is_refused_and_this_hosts_copy_goes(tmp_path):
    write_journal(tmp_path, JOURNAL)
    error = refusal(tmp_path, local=True)
    assert read_journal(tmp_path) is None
    assert error.message.endswith("(no node keeps its journal); this host's copy was removed")
    assert says(error.fix, "check python build.py status")


def test_a_settled_transition_known_only_from_the_nodes_names_no_copy_of_this_host(tmp_path):
    error = refusal(tmp_path, local=False)
    assert error.message.endswith("(no node keeps its journal)")
    assert says(error.fix, "then deploy as usual")
