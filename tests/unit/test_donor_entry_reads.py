"""Reading one donor entry: its bytes when regular, and what to do when it is a link or absent."""

from __future__ import annotations

import pytest

from kvbake.bake.adapters.donor import read_donor_patch
from kvbake.errors import DonorError
from tests.unit.message_words import says


def refused(call) -> DonorError:
    with pytest.raises(DonorError) as caught:
        call()
    assert caught.value.exit_code == 9
    return caught.value


def test_a_regular_entry_is_read_and_a_link_or_an_absent_entry_is_refused_with_its_fix(tmp_path):
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "0001-a.patch").write_bytes(b"data")
    (tmp_path / "patches" / "0002-b.patch").symlink_to(tmp_path / "patches" / "0001-a.patch")
    assert read_donor_patch(tmp_path, "patches/0001-a.patch", "0001") == b"data"
    linked = refused(lambda: read_donor_patch(tmp_path, "patches/0002-b.patch", "0002"))
    assert "patch 0002" in linked.message and "a symlink" in linked.message and says(linked.fix, "the donor must hold each selected patch")
    absent = refused(lambda: read_donor_patch(tmp_path, "patches/0003-c.patch", "0003"))
    assert "patch 0003" in absent.message and "patches/0003-c.patch" in absent.message and says(absent.fix, "use a fresh clone of the donor")
