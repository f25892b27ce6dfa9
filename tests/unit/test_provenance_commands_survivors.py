"""`trace --key` checks the signature where the push record says the release went, not where the manifest would push it."""

from __future__ import annotations

import json

from kvbake.bake.core.plan import tag_for
from kvbake.lock import load_lock_file
from kvbake.provenance import commands
from kvbake.ship.core.push_record import PUSHES_DIR

from test_trace_command import DIGEST, args, cosign_answers, serve, standin, statement  # noqa: F401 (standin is a fixture)

PUSHED_TO = "mirror.example:5000/team/standin-kvpack"


def test_signatures_are_checked_in_the_repository_the_push_record_names(standin, monkeypatch, tmp_path) -> None:
    lock = load_lock_file(standin.lock_path)
    record = standin.root / PUSHES_DIR / f"{tag_for(standin, lock)}.json"
    record.write_text(json.dumps({"pinned": f"{PUSHED_TO}@{DIGEST}"}))
    serve(monkeypatch, DIGEST, lock.derived.image_id)
    asked = cosign_answers(monkeypatch, [DIGEST], [statement(standin)])
    data, _ = commands.cmd_trace(args(standin, (tmp_path / "alice.pub",)))
    assert data["ok"] is True and asked == [f"{PUSHED_TO}@{DIGEST}"]
