"""Where trace looks for the pushed release: the push record's repository, cut at the reference's first @, else the
manifest's own output repository."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvbake.provenance.adapters.evidence import pushed_repository

MANIFEST = SimpleNamespace(output=SimpleNamespace(repository="127.0.0.1:5000/kvbake/standin-kvpack"))
DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("pinned", "repository"), [
    (f"10.0.0.5:5000/team/app@{DIGEST}", "10.0.0.5:5000/team/app"),
    (f"10.0.0.5:5000/team/app@{DIGEST}@{DIGEST}", "10.0.0.5:5000/team/app"),
    (None, "127.0.0.1:5000/kvbake/standin-kvpack"),
    ("", "127.0.0.1:5000/kvbake/standin-kvpack"),
])
def test_the_pushed_repository_is_the_push_records_up_to_its_first_at_else_the_manifests(pinned, repository):
    assert pushed_repository(MANIFEST, pinned) == repository
