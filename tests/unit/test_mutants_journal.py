"""Exact-value tests of journal.py that the mutation run showed were missing: the bytes on disk, every refusal and its message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbake.errors import DivergedError, RolloutError
from kvbake.ship.core.journal import (DIVERGED, JOURNAL, Journal, NodePlan, clear_diverged, clear_journal, journal_from_dict,
                            journal_to_dict, mark_diverged, read_diverged, read_journal, write_journal)

PLAN = NodePlan(node="n1", before_current="sha256:b", before_previous=None, after_current="sha256:a",
                after_previous="sha256:b", before_records={"current": None}, after_records={"current": {"id": "r2"}})
JOURNAL_VALUE = Journal(id="j1", kind="deploy", release_id="r2", nodes=(PLAN,))

JOURNAL_TEXT = """{
 "done": [],
 "id": "j1",
 "kind": "deploy",
 "nodes": [
  {
   "after_current": "sha256:a",
   "after_previous": "sha256:b",
   "after_records": {
    "current": {
     "id": "r2"
    }
   },
   "before_current": "sha256:b",
   "before_previous": null,
   "before_records": {
    "current": null
   },
   "node": "n1"
  }
 ],
 "phase": "planned",
 "release_id": "r2"
}
"""


def test_the_file_names_are_fixed() -> None:
    assert (JOURNAL, DIVERGED) == ("journal.json", "DIVERGED.json")


def test_a_new_journal_starts_planned_with_no_step_done() -> None:
    assert (JOURNAL_VALUE.done, JOURNAL_VALUE.phase) == ((), "planned")


def test_steps_and_phases_return_new_journals() -> None:
    stepped = JOURNAL_VALUE.with_step("after:retag:n1").with_step("after:restart:n1").with_phase("forward")
    assert stepped.done == ("after:retag:n1", "after:restart:n1")
    assert stepped.phase == "forward"
    assert (stepped.id, stepped.kind, stepped.release_id, stepped.nodes) == ("j1", "deploy", "r2", (PLAN,))
    assert JOURNAL_VALUE.done == () and JOURNAL_VALUE.phase == "planned"


def test_the_journal_is_written_as_indented_sorted_json_with_a_final_newline(tmp_path: Path) -> None:
    write_journal(tmp_path, JOURNAL_VALUE)
    assert (tmp_path / "journal.json").read_text(encoding="utf-8") == JOURNAL_TEXT
    assert read_journal(tmp_path) == JOURNAL_VALUE


def test_journal_to_dict_is_the_plain_form() -> None:
    plain = json.loads(JOURNAL_TEXT)
    assert journal_to_dict(JOURNAL_VALUE) == {**plain, "done": (), "nodes": tuple(plain["nodes"])}


def test_a_journal_without_done_reads_as_nothing_done() -> None:
    data = json.loads(JOURNAL_TEXT)
    del data["done"]
    assert journal_from_dict(data) == JOURNAL_VALUE
    assert journal_from_dict({**json.loads(JOURNAL_TEXT), "done": ["a", "b"]}).done == ("a", "b")


@pytest.mark.parametrize(("data", "cause"), [
    ({**json.loads(JOURNAL_TEXT), "nodes": []}, "no id or no nodes"),
    ({**json.loads(JOURNAL_TEXT), "id": 7}, "no id or no nodes"),
    ({**json.loads(JOURNAL_TEXT), "id": None, "nodes": []}, "no id or no nodes"),
    ({k: v for k, v in json.loads(JOURNAL_TEXT).items() if k != "nodes"}, "KeyError: 'nodes'"),
    ({**json.loads(JOURNAL_TEXT), "extra": 1}, "TypeError: Journal.__init__() got an unexpected keyword argument 'extra'"),
    ({**json.loads(JOURNAL_TEXT), "done": 5}, "TypeError: 'int' object is not iterable"),
    ([("id", "x")], "KeyError: 'nodes'"),
    ("abc", "ValueError: dictionary update sequence element #0 has length 1; 2 is required"),
])
def test_journal_from_dict_names_what_is_wrong(data, cause: str) -> None:
    with pytest.raises(ValueError) as caught:
        journal_from_dict(data)
    assert type(caught.value) is ValueError
    assert cause in str(caught.value)


def test_no_journal_file_reads_as_none_and_clearing_twice_is_fine(tmp_path: Path) -> None:
    assert read_journal(tmp_path) is None
    clear_journal(tmp_path)
    write_journal(tmp_path, JOURNAL_VALUE)
    clear_journal(tmp_path)
    assert not (tmp_path / "journal.json").exists()
    clear_journal(tmp_path)


@pytest.mark.parametrize(("content", "cause"), [
    (b"\xff\xfe", "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
    (b"{", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    (b"[]", "KeyError: 'nodes'"),
])
def test_a_corrupt_journal_is_a_rollout_error_naming_the_file(tmp_path: Path, content: bytes, cause: str) -> None:
    (tmp_path / "journal.json").write_bytes(content)
    with pytest.raises(RolloutError) as caught:
        read_journal(tmp_path)
    assert type(caught.value) is RolloutError
    assert caught.value.exit_code == 12
    assert str(tmp_path / "journal.json") in caught.value.message and cause in caught.value.message
    assert "deploy --revert" in caught.value.fix


def test_the_diverged_marker_round_trips_as_indented_sorted_json(tmp_path: Path) -> None:
    assert read_diverged(tmp_path) is None
    mark_diverged(tmp_path, {"kind": "deploy", "cause": None, "by": "op"})
    assert (tmp_path / "DIVERGED.json").read_text(encoding="utf-8") == '{\n "by": "op",\n "cause": null,\n "kind": "deploy"\n}\n'
    assert read_diverged(tmp_path) == {"kind": "deploy", "cause": None, "by": "op"}
    clear_diverged(tmp_path)
    assert not (tmp_path / "DIVERGED.json").exists()
    clear_diverged(tmp_path)
    assert read_diverged(tmp_path) is None


@pytest.mark.parametrize(("content", "reason"), [
    (b"\xff", "UnicodeDecodeError"),
    (b"{", "JSONDecodeError"),
    (b"[1]", "not an object"),
    (b"null", "not an object"),
    (b"\"text\"", "not an object"),
])
def test_a_corrupt_diverged_marker_still_means_diverged(tmp_path: Path, content: bytes, reason: str) -> None:
    (tmp_path / "DIVERGED.json").write_bytes(content)
    with pytest.raises(DivergedError) as caught:
        read_diverged(tmp_path)
    assert type(caught.value) is DivergedError
    assert caught.value.exit_code == 13
    assert str(tmp_path / "DIVERGED.json") in caught.value.message and reason in caught.value.message
    assert "deploy --revert" in caught.value.fix
