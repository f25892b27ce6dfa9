"""The validation report page: title, run header, steps with verdicts and marks, memory chart, pool pressure table."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from kvbake.operate.core.html_validate import validate_html
from kvbake.svg_chart import line_chart
from tests.unit.xhtml_reading import X, all_text, tag

SVG = "{http://www.w3.org/2000/svg}"
GIB = 1024 ** 3
HOSTILE = '<b>x</b> & "q" <script>'
HEADER_LABELS = ["preset", "endpoint", "release", "corpus", "run", "result", "rollback"]


def step(name: str, *, ran: bool = True, passed: bool = True, summary: str = "ok", stop: str | None = None,
         checks: tuple[dict, ...] = (), data: dict | None = None) -> dict:
    return {"name": name, "ran": ran, "passed": passed, "summary": summary, "stop": stop, "checks": list(checks),
            "data": {} if data is None else data}


def check(name: str, passed: bool, detail: str) -> dict:
    return {"name": name, "passed": passed, "detail": detail}


def stopped_steps() -> list[dict]:
    """Two passed steps, one stopped by two failing checks (one check passing), and two steps that never ran."""
    return [
        step("inertness", summary="3 fresh-salt runs", checks=(check("same prompt", True, "prompt_tokens [40]"),),
             data={"runs": 3, "floor": 0.0}),
        step("prefix identity", summary="cached prefix matches"),
        step("corruption set", passed=False, summary=f"2 of 3 answers wrong {HOSTILE}", stop="answers differ <a&b>",
             checks=(check("first", True, "fine"), check("second", False, f"got {HOSTILE}"),
                     check("third", False, "got 7"))),
        step("needles", ran=False, passed=False, summary="not run"),
        step("pressure", ran=False, passed=False, summary="not run"),
    ]


def pressure_data(**changes: object) -> dict:
    data = {"requests": 6, "passed": 5, "foreign": 1, "prompt_tokens": [4000, 4100], "preemptions": 2,
            "note": f"counted from /metrics {HOSTILE}",
            "derivation": {"admitted_at_least": 3, "demand_blocks": 90, "usable_blocks": 80, "pool_blocks": 100,
                           "block_size": 16, "max_tokens": 64, "pool_source": f"metrics {HOSTILE}"}}
    return data | changes


def passed_steps(pressure: dict | None = None) -> list[dict]:
    return [step("inertness", data={"runs": 3}), step("prefix identity"), step("corruption set"), step("needles"),
            step("pressure", summary="6 requests", data=pressure_data() if pressure is None else pressure)]


def memory(**changes: object) -> dict:
    lowest = {"spark-a": 4 * GIB, "spark-b": 2 * GIB}
    return {"watched": True, "floor_bytes": int(1.5 * GIB), "samples": 4, "lowest_bytes": lowest} | changes


def report(**changes: object) -> dict:
    data = {"preset": "control", "status": "tested", "override": None, "max_model_len": 8192, "switches": {},
            "endpoint": "http://127.0.0.1:8000", "model": "tiny-model", "release": {"id": "r-7", "text": "r-7 by ops"},
            "corpus": "synthetic", "oracle": {}, "started": "2026-01-01T00:00:00Z", "finished": "2026-01-01T00:05:00Z",
            "outcome": "passed", "stop": None, "steps": passed_steps(), "memory": memory(), "rollback": "not needed"}
    return data | changes


def stopped_report(**changes: object) -> dict:
    return report(outcome="stopped", stop={"step": "corruption set", "reason": "answers differ <a&b>", "fix": "look"},
                  steps=stopped_steps(), rollback="rolled back to r-6") | changes


READINGS = [(0.0, "spark-a", 6 * GIB), (0.04, "spark-b", 3 * GIB), (5.23, "spark-a", 4 * GIB), (5.26, "spark-b", 2 * GIB),
            (9.91, "spark-a", int(4.5 * GIB))]


def root_of(data: dict, readings: list = READINGS) -> ET.Element:
    return ET.fromstring(validate_html(data, readings))


def body_of(data: dict, readings: list = READINGS) -> ET.Element:
    body = root_of(data, readings).find(f"{X}body")
    assert body is not None
    return body


def tables(body: ET.Element) -> list[ET.Element]:
    return body.findall(f"{X}table")


def headers(table: ET.Element) -> list[str | None]:
    cells = table.findall(f"{X}thead/{X}tr/{X}th")
    return [cell.text for cell in cells]


def rows(table: ET.Element) -> list[ET.Element]:
    return table.findall(f"{X}tbody/{X}tr")


def cells(row: ET.Element) -> list[ET.Element]:
    found = row.findall(f"{X}td")
    assert [tag(child) for child in row] == ["td"] * len(found)
    return found


def header_table(body: ET.Element) -> dict[str, tuple[str, str | None]]:
    """The run header as label -> (value, row class), checking its labels come in their order."""
    table = tables(body)[0]
    assert headers(table) == [None, None]
    found = [(all_text(label), all_text(value), row.get("class")) for row in rows(table) for label, value in [cells(row)]]
    assert [label for label, _, _ in found] == HEADER_LABELS
    return {label: (value, kind) for label, value, kind in found}


def steps_table(body: ET.Element) -> ET.Element:
    return tables(body)[1]


# --- the page as a whole ---------------------------------------------------------------------------------------------


def test_the_page_is_titled_after_the_preset() -> None:
    root = root_of(report(preset="packing"))
    assert root.find(f"{X}head/{X}title").text == "validate packing"
    assert root.find(f"{X}body/{X}h1").text == "validate packing"


def test_the_page_has_the_header_then_steps_then_memory_then_pool_pressure() -> None:
    body = body_of(report())
    assert [tag(child) for child in body] == ["h1", "table", "h2", "table", "h2", "p", "svg", "h2", "table", "p"]
    assert [h2.text for h2 in body.findall(f"{X}h2")] == ["Steps", "MemAvailable per node", "Pool pressure"]
    assert all(len(h2) == 0 for h2 in body.findall(f"{X}h2"))


def test_a_stopped_run_without_a_pressure_run_ends_with_the_memory_chart() -> None:
    body = body_of(stopped_report())
    assert [tag(child) for child in body] == ["h1", "table", "h2", "table", "h2", "p", "svg"]
    assert [h2.text for h2 in body.findall(f"{X}h2")] == ["Steps", "MemAvailable per node"]


def test_the_page_keeps_hostile_text_as_text() -> None:
    document = validate_html(stopped_report(corpus=HOSTILE), READINGS)
    root = ET.fromstring(document)
    assert not [e for e in root.iter() if tag(e) in ("script", "b", "a")]
    assert header_table(root.find(f"{X}body"))["corpus"] == (HOSTILE, None)
    assert f"got {HOSTILE}" in all_text(root)


# --- the run header ----------------------------------------------------------------------------------------------------


def test_the_header_shows_each_field_of_a_passed_run_with_the_result_marked_good() -> None:
    header = header_table(body_of(report()))
    assert header == {
        "preset": ("control (tested, max-model-len 8192)", None),
        "endpoint": ("http://127.0.0.1:8000 (model tiny-model)", None),
        "release": ("r-7 by ops", None),
        "corpus": ("synthetic", None),
        "run": ("2026-01-01T00:00:00Z .. 2026-01-01T00:05:00Z", None),
        "result": ("PASSED: every step that ran passed", "good"),
        "rollback": ("not needed", None),
    }


def test_the_header_of_a_stopped_run_names_the_step_and_reason_and_marks_the_result_bad() -> None:
    header = header_table(body_of(stopped_report()))
    assert header["result"] == ("STOPPED at corruption set: answers differ <a&b>", "bad")
    assert header["rollback"] == ("rolled back to r-6", None)
    assert [kind for _, kind in header.values()] == [None] * 5 + ["bad", None]


def test_an_unknown_model_reads_unknown() -> None:
    header = header_table(body_of(report(model=None)))
    assert header["endpoint"] == ("http://127.0.0.1:8000 (model unknown)", None)


def test_a_release_without_text_shows_a_dash() -> None:
    header = header_table(body_of(report(release={"id": None})))
    assert header["release"] == ("-", None)


def test_a_missing_rollback_shows_a_dash() -> None:
    header = header_table(body_of(report(rollback=None)))
    assert header["rollback"] == ("-", None)


# --- the steps table ---------------------------------------------------------------------------------------------------


def test_the_steps_table_has_its_column_headers() -> None:
    assert headers(steps_table(body_of(stopped_report()))) == [None, "step", "verdict", "summary"]


def test_each_step_is_numbered_from_one_with_its_name_and_verdict() -> None:
    table = steps_table(body_of(stopped_report()))
    found = [[all_text(c) for c in cells(row)[:3]] for row in rows(table)]
    assert found == [["1", "inertness", "passed"], ["2", "prefix identity", "passed"], ["3", "corruption set", "STOPPED"],
                     ["4", "needles", "not run"], ["5", "pressure", "not run"]]


def test_passed_rows_are_good_the_stopped_row_bad_and_rows_not_run_unmarked() -> None:
    table = steps_table(body_of(stopped_report()))
    assert [row.get("class") for row in rows(table)] == ["good", "good", "bad", None, None]


def test_a_step_that_ran_without_passing_or_stopping_reads_not_run() -> None:
    steps = [step("inertness", passed=False, summary="no answer", checks=(check("answer", True, "ok"),))]
    table = steps_table(body_of(report(steps=steps)))
    (row,) = rows(table)
    assert [all_text(c) for c in cells(row)] == ["1", "inertness", "not run", "no answer"]
    assert row.get("class") is None


def test_a_passed_step_shows_only_its_summary() -> None:
    table = steps_table(body_of(stopped_report()))
    summary = cells(rows(table)[0])[3]
    assert summary.text == "3 fresh-salt runs" and len(summary) == 0


def test_the_stopped_step_shows_its_stop_mark_then_each_failing_check() -> None:
    table = steps_table(body_of(stopped_report()))
    summary = cells(rows(table)[2])[3]
    assert summary.text == f"2 of 3 answers wrong {HOSTILE}"
    marks = list(summary)
    assert [tag(mark) for mark in marks] == ["div", "div", "div"]
    assert [mark.get("class") for mark in marks] == ["mark", None, None]
    assert [mark.text for mark in marks] == ["stop: answers differ <a&b>", f"FAIL second: got {HOSTILE}", "FAIL third: got 7"]
    assert all(len(mark) == 0 and not (mark.tail or "") for mark in marks)


def test_a_failing_check_without_a_stop_is_listed_without_a_stop_mark() -> None:
    steps = [step("inertness", passed=False, summary="s", checks=(check("answer", False, "empty"),))]
    summary = cells(rows(steps_table(body_of(report(steps=steps))))[0])[3]
    assert summary.text == "s"
    assert [(tag(m), m.get("class"), m.text) for m in summary] == [("div", None, "FAIL answer: empty")]


def test_no_steps_leave_an_empty_steps_table_under_its_headers() -> None:
    body = body_of(report(steps=[]))
    assert headers(steps_table(body)) == [None, "step", "verdict", "summary"]
    assert rows(steps_table(body)) == []
    assert len(tables(body)) == 2


# --- memory ------------------------------------------------------------------------------------------------------------


def memory_parts(body: ET.Element) -> list[ET.Element]:
    children = list(body)
    start = [i for i, child in enumerate(children) if tag(child) == "h2" and child.text == "MemAvailable per node"][0]
    return children[start + 1:start + 3]


def test_watched_memory_notes_the_floor_each_nodes_lowest_and_the_samples() -> None:
    note, chart = memory_parts(body_of(report()))
    assert tag(note) == "p" and note.get("class") is None
    assert note.text == "floor 1.50 GiB; lowest spark-a 4.00 GiB, spark-b 2.00 GiB; 4 samples"
    assert chart.tag == f"{SVG}svg"


def test_watched_memory_without_lows_reads_not_read() -> None:
    note, _ = memory_parts(body_of(report(memory=memory(lowest_bytes={}, samples=0)), readings=[]))
    assert note.text == "floor 1.50 GiB; lowest not read; 0 samples"


def test_the_chart_draws_each_node_in_gib_over_seconds_rounded_to_a_tenth() -> None:
    document = validate_html(report(), READINGS)
    expected = line_chart({"spark-a": [(0.0, 6.0), (5.2, 4.0), (9.9, 4.5)], "spark-b": [(0.0, 3.0), (5.3, 2.0)]},
                          "seconds since the first sample", "MemAvailable (GiB)", limit=1.5, limit_label="floor 1.50 GiB",
                          y_format=lambda v: f"{v:.1f}")
    assert expected in document


def test_the_chart_labels_its_axes_nodes_and_floor_with_one_decimal_gib_ticks() -> None:
    _, chart = memory_parts(body_of(report()))
    labels = [t.text for t in chart.iter(f"{SVG}text")]
    for label in ("seconds since the first sample", "MemAvailable (GiB)", "floor 1.50 GiB", "spark-a", "spark-b", "0.0"):
        assert label in labels
    assert [len(line.get("points").split()) for line in chart.findall(f"{SVG}polyline")] == [3, 2]
    assert any(line.get("stroke-dasharray") for line in chart.findall(f"{SVG}line"))


def test_watched_memory_without_readings_charts_no_samples() -> None:
    _, chart = memory_parts(body_of(report(), readings=[]))
    assert chart.findall(f"{SVG}polyline") == []
    assert "no samples recorded" in [t.text for t in chart.iter(f"{SVG}text")]


def test_unwatched_memory_says_so_with_the_floor_and_draws_no_chart() -> None:
    body = body_of(report(memory={"watched": False, "floor_bytes": 2 * GIB, "samples": 0, "lowest_bytes": {}}), readings=[])
    assert body.find(f".//{SVG}svg") is None
    children = list(body)
    heading = [i for i, child in enumerate(children) if tag(child) == "h2" and child.text == "MemAvailable per node"][0]
    note = children[heading + 1]
    assert tag(note) == "p" and note.get("class") == "none"
    assert note.text == "not watched (no --deploy); floor 2.00 GiB"
    assert tag(children[heading + 2]) == "h2" and children[heading + 2].text == "Pool pressure"


# --- pool pressure -----------------------------------------------------------------------------------------------------


def pressure_parts(body: ET.Element) -> list[ET.Element]:
    children = list(body)
    start = [i for i, child in enumerate(children) if tag(child) == "h2" and child.text == "Pool pressure"]
    return children[start[0]:] if start else []


def pressure_rows(table: ET.Element) -> list[tuple[str, str]]:
    assert headers(table) == [None, None]
    assert all(row.get("class") is None for row in rows(table))
    return [(all_text(label), all_text(value)) for row in rows(table) for label, value in [cells(row)]]


def test_the_pressure_step_shows_its_counts_then_its_derivation_then_its_note() -> None:
    heading, table, note = pressure_parts(body_of(report()))
    assert heading.text == "Pool pressure" and tag(table) == "table"
    assert pressure_rows(table) == [
        ("requests sent", "6"), ("requests correct", "5"), ("foreign codes", "1"), ("prompt tokens", "[4000, 4100]"),
        ("preemptions counted", "2"), ("admitted together, at least", "3"), ("blocks they need", "90"),
        ("usable blocks", "80"), ("pool blocks", "100"), ("block size (tokens)", "16"), ("answer tokens each", "64"),
        ("pool read from", f"metrics {HOSTILE}")]
    assert tag(note) == "p" and note.get("class") == "none" and note.text == f"counted from /metrics {HOSTILE}"


def test_the_pressure_table_lists_only_the_fields_present() -> None:
    data = {"requests": 4, "preemptions": 0, "derivation": {"pool_blocks": 12, "max_tokens": 32}}
    parts = pressure_parts(body_of(report(steps=passed_steps(data))))
    assert [tag(p) for p in parts] == ["h2", "table"]
    assert pressure_rows(parts[1]) == [("requests sent", "4"), ("preemptions counted", "0"), ("pool blocks", "12"),
                                       ("answer tokens each", "32")]


def test_pressure_data_without_a_derivation_shows_only_the_counts() -> None:
    for derivation in ({"derivation": None}, {}):
        data = {"requests": 2, "passed": 2, "note": "n"} | derivation
        heading, table, note = pressure_parts(body_of(report(steps=passed_steps(data))))
        assert pressure_rows(table) == [("requests sent", "2"), ("requests correct", "2")]
        assert note.text == "n"


def test_pressure_data_with_an_empty_note_has_no_note() -> None:
    parts = pressure_parts(body_of(report(steps=passed_steps(pressure_data(note="")))))
    assert [tag(p) for p in parts] == ["h2", "table"]


def test_a_pressure_step_without_data_has_no_pool_pressure_section() -> None:
    steps = passed_steps()
    steps[4]["data"] = {}
    assert pressure_parts(body_of(report(steps=steps))) == []
    del steps[4]["data"]
    assert pressure_parts(body_of(report(steps=steps))) == []


def test_a_pressure_step_that_did_not_run_has_no_section_even_with_data() -> None:
    steps = passed_steps()
    steps[4] |= {"ran": False, "passed": False}
    body = body_of(report(steps=steps))
    assert pressure_parts(body) == []
    assert list(body)[-1].tag == f"{SVG}svg"


def test_the_section_comes_from_the_step_named_pressure_that_ran() -> None:
    steps = [step("inertness", data=pressure_data(requests=111)),
             step("pressure", ran=False, passed=False, data=pressure_data(requests=222)),
             step("needles", data=pressure_data(requests=333)), step("pressure", data=pressure_data(requests=444)),
             step("pressure", data=pressure_data(requests=555))]
    _, table, _ = pressure_parts(body_of(report(steps=steps)))
    assert pressure_rows(table)[0] == ("requests sent", "444")


def test_no_steps_leave_no_pool_pressure_section() -> None:
    assert pressure_parts(body_of(report(steps=[]))) == []
