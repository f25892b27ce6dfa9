"""The build record's file (sorted, one-space indents, beside other records) and its UTC time stamp."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from kvbake.bake.core import build_record as module
from kvbake.bake.core.build_record import write_json_record
from tests.unit.test_build_record import built


def test_a_second_record_lands_beside_the_first_sorted_and_indented_by_one_space(tmp_path):
    folder = tmp_path / "records"
    first = write_json_record(folder, "reg/x:one", {"b": 1, "a": {"c": 2}})
    second = write_json_record(folder, "reg:5000/x:two", {"z": 1})
    assert sorted(p.name for p in folder.iterdir()) == ["one.json", "two.json"] and second == folder / "two.json"
    assert first.read_text() == '{\n "a": {\n  "c": 2\n },\n "b": 1\n}\n'
    assert json.loads(second.read_text()) == {"z": 1}


class FrozenClock:
    """datetime whose now() is 2030-01-02 03:04:05 in the zone asked for (local time is UTC+9)."""

    @staticmethod
    def now(tz=None):
        if tz is timezone.utc:
            return datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
        return datetime(2030, 1, 2, 12, 4, 5)


def test_the_record_is_stamped_in_utc(monkeypatch):
    monkeypatch.setattr(module, "datetime", FrozenClock)
    monkeypatch.setattr(module, "plan_summary", lambda plan: {})
    assert module.build_record(built(), "kvbake")["built_at"] == "2030-01-02T03:04:05Z"
