"""The CRDs in kvbake/data/k8s are upstream's files, byte for byte, with their licence: every file is pinned here."""

from __future__ import annotations

import hashlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "kvbake" / "data" / "k8s"
PINNED = {
    "LICENSE": "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30",
    "README.md": "5b634c504941fb23167e22226dffd116c9d7dd0c0ae583d1ed18b8d7086a3bfe",
    "lws-060ab4d.yaml": "c5dcad8ed943e495490241f00b9a1b45d51203b6d484020db3636d5bf553568e",
    "policy-controller-cip-f925c0c.yaml": "e23467593124763d9937b1180d48cefe89dc72cf04e9bcf84cbf29822d51b20c",
}


def test_every_crd_file_is_the_pinned_one_and_nothing_else_is_there() -> None:
    found = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in CRDS.iterdir() if path.is_file()}
    assert found == PINNED


def test_their_licence_is_the_apache_text_licenses_holds_and_notice_names_both_commits() -> None:
    assert (CRDS / "LICENSE").read_bytes() == (REPO / "LICENSES" / "Apache-2.0.txt").read_bytes()
    notice = (REPO / "NOTICE").read_text(encoding="utf-8")
    assert "060ab4da17eea1f0865fcbd3236bb1075e2cea32" in notice and "f925c0c1a412910787a7f045581fa9d5ed09a20a" in notice


def test_the_package_data_carries_them() -> None:
    assert '"data/k8s/*"' in (REPO / "pyproject.toml").read_text(encoding="utf-8")
