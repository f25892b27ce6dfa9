"""The rollout model reads the fixes kvbake prints as commands: what it runs for each, and what it leaves as advice."""

from __future__ import annotations

import pytest

from model_fixes import advice_only, as_command, printed_fixes


@pytest.mark.parametrize(("fix", "named"), [
    ("run python build.py deploy --resume to finish it or deploy --revert to undo it, from any operator host",
     [("deploy", {"--resume": None}), ("deploy", {"--revert": None})]),
    ("re-create its records with: python build.py deploy --preset NAME --reseat a", [("deploy", {"--preset": "NAME", "--reseat": "a"})]),
    ("bring the nodes back, then run: python build.py deploy --revert --deploy deploy.yaml", [("deploy", {"--revert": None, "--deploy": "deploy.yaml"})]),
    ("finish or undo it with python build.py adopt --resume or adopt --revert", [("adopt", {"--resume": None}), ("adopt", {"--revert": None})]),
    ("deploy again (its plan is stale now)", [("deploy", {})]),
    ("run python build.py base sync --force first", [("base sync", {"--force": None})]),
    ("check that no deploy is running, then pass --break-lock (it is recorded in the audit log)", []),
    ("deploy a kvbake release first", []),
])
def test_the_commands_a_fix_names_are_read_with_their_options(fix, named):
    assert printed_fixes(fix) == named


def test_a_read_only_command_is_not_run_and_every_other_one_is():
    assert as_command("status", {}) is None
    assert all(as_command(c, o) is not None for c, o in [("deploy", {"--revert": None}), ("deploy", {"--preset": "NAME", "--reseat": "a"}),
                                                         ("adopt", {"--release": None}), ("rollback", {"--to": "adopted"}), ("base sync", {})])


def test_a_fix_with_no_command_must_still_say_what_to_do():
    assert advice_only("wait for that deploy to finish; two deploys never run at once")
    assert not advice_only("") and not advice_only("see above")
