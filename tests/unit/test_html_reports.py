"""The HTML reports: well-formed XHTML, a chart where one belongs, hostile text kept as text, nothing run or fetched."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from kvbake.html_report import page, table, text
from kvbake.operate.core.html_validate import validate_html
from kvbake.rebase.core.html_rebase import report_html
from kvbake.ship.core.html_status import status_html
from kvbake.svg_chart import line_chart

X = "{http://www.w3.org/1999/xhtml}"
SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert("x")</script> & <img src="https://example.com/x.png"/>'
GIB = 1024 ** 3


def parsed(document: str) -> ET.Element:
    """The page parsed as XML; it runs nothing and fetches nothing."""
    root = ET.fromstring(document)
    assert root.tag == f"{X}html"
    tags = {element.tag.rpartition("}")[2] for element in root.iter()}
    assert not tags & {"script", "img", "link", "iframe", "object", "embed"}, tags
    for element in root.iter():
        for name, value in element.attrib.items():
            assert not (name.rpartition("}")[2] in ("src", "href") and "://" in value), (element.tag, name, value)
            assert not name.startswith("on"), (element.tag, name)
    return root


def all_text(root: ET.Element) -> str:
    return "".join(root.itertext())


def test_a_page_escapes_its_text_and_keeps_it() -> None:
    root = parsed(page(HOSTILE, table(("a & b",), [[text(HOSTILE)]])))
    assert root.find(f"{X}head/{X}title").text == HOSTILE
    assert HOSTILE in all_text(root.find(f"{X}body/{X}table"))


def test_the_chart_draws_a_polyline_per_series_and_the_limit() -> None:
    svg = ET.fromstring(line_chart({"a": [(0, 5.0), (10, 4.0)], HOSTILE: [(0, 3.0), (5, 2.5), (10, 2.0)]}, "s", "GiB",
                                   limit=1.5, limit_label="floor"))
    assert svg.tag == f"{SVG}svg"
    lines = svg.findall(f"{SVG}polyline")
    assert [len(line.get("points").split()) for line in lines] == [2, 3]
    assert any(line.get("stroke-dasharray") for line in svg.findall(f"{SVG}line"))
    labels = [t.text for t in svg.iter(f"{SVG}text")]
    assert HOSTILE in labels and "floor" in labels


def test_a_chart_without_samples_says_so() -> None:
    svg = ET.fromstring(line_chart({}, "s", "GiB", limit=1.0))
    assert not svg.findall(f"{SVG}polyline") and "no samples recorded" in [t.text for t in svg.iter(f"{SVG}text")]


def release(release_id: str, preset: str) -> dict:
    return {"id": release_id, "preset": preset, "image": "r/i@sha256:0", "max_model_len": 8192, "deployed_at": "2026-01-01T00:00:00Z",
            "deployed_by": "ops", "reason": "r", "signed_by": None}


def test_the_status_page_has_a_row_per_node_and_the_marks() -> None:
    data = {"nodes": [
        {"node": "spark-a", "role": "head", "current": release(HOSTILE, "control"), "recorded_current_missing": False,
         "previous": release("r0", "packing"), "running": True, "running_layers": 3, "running_matches_current": True,
         "switches": {"VLLM_X": "1 & <2>"}},
        {"node": "spark-b", "role": "worker", "current": None, "recorded_current_missing": True, "previous": None,
         "running": False, "running_layers": 0, "running_matches_current": False, "switches": {}}],
        "diverged": True, "marked_diverged": {"repair": "deploy --revert <now>"}, "pending_journal": "j-1"}
    root = parsed(status_html(data))
    rows = root.findall(f"{X}body/{X}table/{X}tbody/{X}tr")
    assert len(rows) == 2 and [r.get("class") for r in rows] == ["good", "bad"]
    first = all_text(rows[0])
    assert HOSTILE in first and "(control)" in first and "r0 (packing)" in first and "VLLM_X=1 & <2>" in first
    assert "no longer on the node" in all_text(rows[1])
    marks = all_text(root.find(f"{X}body/{X}ul"))
    assert "DIVERGED" in marks and "repair: deploy --revert <now>" in marks and "interrupted: j-1" in marks


def test_the_status_page_of_a_fleet_in_agreement_has_no_marks() -> None:
    data = {"nodes": [], "diverged": False, "marked_diverged": None, "pending_journal": None}
    assert "none: the ranks agree" in all_text(parsed(status_html(data)))


def rebase_data() -> dict:
    upstream = {"diff": f"@@ -3,1 +3,1 @@\n-old\n+{HOSTILE}\n", "conflicting_lines": [3]}
    return {
        "manifest": "manifest.yaml", "from": {"image": "base:1", "config_digest": "sha256:a"},
        "to": {"image": "base:2", "config_digest": "sha256:b"},
        "files": [{"path": "v/x.py", "change": "modify", "state": "changed", "before": "a", "now": "b"}],
        "patches": [{"id": "0077", "file": "patches/0077.patch", "status": "conflict", "files": [], "hunks": [
            {"path": "v/x.py", "number": 1, "header": "@@ -1,2 +1,2 @@", "status": "offset", "offset": 4, "line": 5},
            {"path": "v/x.py", "number": 2, "header": "@@ -3,1 +3,1 @@", "status": "conflict",
             "reason": "both sides change these lines", "upstream": upstream}]}],
        "counts": {"clean": 0, "offset": 1, "merged": 0, "conflict": 1}, "needs_person": ["0077"],
        "new_switches": [], "unread_switches": [],
    }


def test_the_rebase_page_puts_each_hunk_beside_the_upstream_change_it_meets() -> None:
    hunks = {"0077": {("v/x.py", 1): "@@ -1,2 +1,2 @@\n a\n-b\n+c\n", ("v/x.py", 2): f"@@ -3,1 +3,1 @@\n-old\n+{HOSTILE} ours\n"}}
    root = parsed(report_html(rebase_data(), hunks))
    side = root.find(f"{X}body/{X}table[@class='side']")
    rows = side.findall(f"{X}tbody/{X}tr")
    assert [r.get("class") for r in rows] == ["good", "bad"]
    ours, theirs = rows[1].findall(f"{X}td")
    assert f"+{HOSTILE} ours" in all_text(ours) and f"+{HOSTILE}\n" in all_text(theirs) and "old lines 3" in all_text(theirs)
    assert "applies at line 5 (+4 lines)" in all_text(rows[0]) and "none recorded" in all_text(rows[0])


def test_a_hunk_without_its_text_shows_its_header() -> None:
    root = parsed(report_html(rebase_data(), {}))
    assert "@@ -1,2 +1,2 @@" in all_text(root.find(f"{X}body/{X}table[@class='side']"))


def validate_data(stop: bool) -> dict:
    pressure = {"name": "pressure", "ran": True, "passed": not stop, "summary": "3/3 requests correct", "checks": [],
                "stop": "no preemption" if stop else None,
                "data": {"requests": 3, "passed": 3, "foreign": 0, "prompt_tokens": [4000], "preemptions": 0 if stop else 2,
                         "note": "preemptions are counted from /metrics", "derivation": {"admitted_at_least": 3, "demand_blocks": 90,
                                                                                        "usable_blocks": 80, "pool_source": HOSTILE}}}
    steps = [{"name": "inertness", "ran": True, "passed": True, "summary": HOSTILE, "stop": None,
              "checks": [{"name": "answer", "passed": True, "detail": "ok"}], "data": {}},
             {"name": "needles", "ran": False, "passed": False, "summary": "not run", "stop": None, "checks": [], "data": {}},
             pressure]
    return {"preset": "control", "status": "tested", "override": None, "max_model_len": 8192, "switches": {},
            "endpoint": "http://127.0.0.1:8000", "model": "tiny", "release": {"id": None, "text": "no release record"},
            "corpus": "synthetic", "oracle": {}, "started": "s", "finished": "f", "outcome": "stopped" if stop else "passed",
            "stop": {"step": "pressure", "reason": "no preemption", "fix": "x"} if stop else None, "steps": steps,
            "memory": {"watched": True, "floor_bytes": int(1.5 * GIB), "samples": 3, "lowest_bytes": {"a": 4 * GIB, "b": 2 * GIB}},
            "rollback": "not needed"}


def test_the_validate_page_charts_memory_per_node_against_the_floor_and_shows_the_pressure_step() -> None:
    readings = [(0.0, "a", 6 * GIB), (0.0, "b", 3 * GIB), (5.2, "a", 4 * GIB), (5.2, "b", 2 * GIB), (9.9, "a", 5 * GIB), (9.9, "b", 2 * GIB)]
    root = parsed(validate_html(validate_data(stop=True), readings))
    svg = root.find(f".//{SVG}svg")
    assert [len(line.get("points").split()) for line in svg.findall(f"{SVG}polyline")] == [3, 3]
    assert "floor 1.50 GiB" in [t.text for t in svg.iter(f"{SVG}text")]
    steps = root.findall(f"{X}body/{X}table")[1].findall(f"{X}tbody/{X}tr")
    assert [r.get("class") for r in steps] == ["good", None, "bad"] and HOSTILE in all_text(steps[0])
    pressure = all_text(root.findall(f"{X}body/{X}table")[2])
    assert "admitted together, at least3" in pressure and "preemptions counted0" in pressure and HOSTILE in pressure


def test_the_validate_page_without_watched_memory_says_so() -> None:
    data = validate_data(stop=False) | {"memory": {"watched": False, "floor_bytes": GIB, "samples": 0, "lowest_bytes": {}}}
    root = parsed(validate_html(data))
    assert root.find(f".//{SVG}svg") is None and "not watched (no --deploy)" in all_text(root)
