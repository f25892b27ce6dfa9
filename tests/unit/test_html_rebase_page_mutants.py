"""The rebase report page: its title, summary list, files table and one section per patch with each hunk's marks and text."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from kvbake.rebase.core.html_rebase import report_html
from tests.unit.xhtml_reading import X, all_text, tag

CONFLICT_DIFF = "@@ -9,1 +9,1 @@\n-old\n+theirs\n"


def report_data(**changes: object) -> dict:
    data = {
        "manifest": "serve/manifest.yaml",
        "from": {"image": "vllm:0.9", "config_digest": "sha256:old"},
        "to": {"image": "vllm:0.10", "config_digest": "sha256:new"},
        "files": [{"path": "vllm/a.py", "change": "none", "state": "unchanged", "before": "a", "now": "a"},
                  {"path": "vllm/b.py", "change": "modify", "state": "changed", "before": "b", "now": "c"}],
        "patches": [
            {"id": "0001", "file": "patches/0001-fix.patch", "status": "conflict", "files": [], "hunks": [
                {"path": "vllm/b.py", "number": 1, "header": "@@ -1,2 +1,2 @@", "status": "clean"},
                {"path": "vllm/b.py", "number": 2, "header": "@@ -9,1 +9,1 @@", "status": "conflict",
                 "reason": "both sides change these lines", "upstream": {"diff": CONFLICT_DIFF, "conflicting_lines": [9]}}]},
            {"id": "0002", "file": "patches/0002-merge.patch", "status": "merged", "files": [], "hunks": [
                {"path": "vllm/c.py", "number": 1, "header": "@@ -4,1 +4,2 @@", "status": "merged"}]},
        ],
        "counts": {"clean": 1, "offset": 0, "merged": 1, "conflict": 1},
        "needs_person": ["0001", "0002"],
        "new_switches": ["VLLM_NEW_A", "VLLM_NEW_B"],
        "unread_switches": ["VLLM_OLD_A", "VLLM_OLD_B"],
    }
    return data | changes


HUNKS = {"0001": {("vllm/b.py", 1): "@@ -1,2 +1,2 @@\n a\n-b\n+ours one\n",
                  ("vllm/b.py", 2): "@@ -9,1 +9,1 @@\n-old\n+ours two\n"},
         "0002": {("vllm/c.py", 1): "@@ -4,1 +4,2 @@\n x\n+ours three\n"}}


def body_of(data: dict, hunks: dict = HUNKS) -> ET.Element:
    root = ET.fromstring(report_html(data, hunks))
    body = root.find(f"{X}body")
    assert body is not None
    return body


def summary_items(body: ET.Element) -> list[str]:
    summary = body.find(f"{X}ul")
    assert summary is not None and not (summary.text or "").strip()
    items = list(summary)
    assert [tag(item) for item in items] == ["li"] * 6
    assert all(not (item.tail or "").strip() for item in items)
    return [all_text(item) for item in items]


def side_rows(body: ET.Element) -> list[list[ET.Element]]:
    tables = body.findall(f"{X}table[@class='side']")
    return [row.findall(f"{X}td") for side in tables for row in side.findall(f"{X}tbody/{X}tr")]


def test_the_page_is_titled_after_the_manifest() -> None:
    root = ET.fromstring(report_html(report_data(), HUNKS))
    assert root.find(f"{X}head/{X}title").text == "Rebase of serve/manifest.yaml"
    assert root.find(f"{X}body/{X}h1").text == "Rebase of serve/manifest.yaml"


def test_the_page_has_the_summary_then_the_files_then_a_section_per_patch() -> None:
    body = body_of(report_data())
    assert [tag(child) for child in body] == ["h1", "ul", "h2", "table", "h2", "p", "table", "h2", "p", "table"]
    assert [all_text(h2) for h2 in body.findall(f"{X}h2")] == ["Files on the new base", "0001: conflict", "0002: merged"]


def test_the_summary_lists_both_images_the_counts_and_the_named_lists() -> None:
    items = summary_items(body_of(report_data()))
    assert "vllm:0.9" in items[0] and "sha256:old" in items[0] and "vllm:0.10" not in items[0]
    assert "vllm:0.10" in items[1] and "sha256:new" in items[1]
    assert "1 clean, 0 offset, 1 merged, 1 conflicted" in items[2]
    assert items[3].startswith("needs a person") and items[3].endswith(": 0001, 0002")
    assert items[4].startswith("environment names read on the new base") and items[4].endswith(": VLLM_NEW_A, VLLM_NEW_B")
    assert items[5].startswith("declared switches no longer read") and items[5].endswith(": VLLM_OLD_A, VLLM_OLD_B")


def test_the_summary_says_none_for_each_empty_list() -> None:
    items = summary_items(body_of(report_data(needs_person=[], new_switches=[], unread_switches=[])))
    assert [item.rpartition(": ")[2] for item in items[3:]] == ["none", "none", "none"]


def test_the_files_table_has_a_row_per_file_marked_good_only_when_unchanged() -> None:
    files = body_of(report_data()).find(f"{X}table")
    assert files.get("class") is None
    assert [th.text for th in files.findall(f"{X}thead/{X}tr/{X}th")] == ["file", "change", "state"]
    rows = files.findall(f"{X}tbody/{X}tr")
    assert [[td.text for td in row.findall(f"{X}td")] for row in rows] == [["vllm/a.py", "none", "unchanged"],
                                                                             ["vllm/b.py", "modify", "changed"]]
    assert [row.get("class") for row in rows] == ["good", "warn"]


def test_each_patch_heading_is_coloured_by_its_status_and_names_its_file() -> None:
    body = body_of(report_data())
    assert [h2.get("class") for h2 in body.findall(f"{X}h2")] == [None, "bad", "warn"]
    paragraphs = body.findall(f"{X}p")
    assert [[tag(child) for child in p] for p in paragraphs] == [["code"], ["code"]]
    assert [p.find(f"{X}code").text for p in paragraphs] == ["patches/0001-fix.patch", "patches/0002-merge.patch"]


def test_each_hunk_row_names_the_hunk_marks_a_conflict_and_shows_its_text() -> None:
    rows = side_rows(body_of(report_data()))
    assert len(rows) == 3
    ours = [row[0] for row in rows]
    assert [[tag(child) for child in cell] for cell in ours] == [["div", "div", "pre"]] * 3
    names = [cell[0] for cell in ours]
    assert [all_text(name) for name in names] == ["vllm/b.py hunk 1: clean", "vllm/b.py hunk 2: conflict", "vllm/c.py hunk 1: merged"]
    assert [name.get("class") for name in names] == [None, "mark", None]
    details = [cell[1] for cell in ours]
    assert [detail.get("class") for detail in details] == ["none"] * 3
    assert "both sides change these lines" in all_text(details[1]) and all_text(details[0]) == "@@ -1,2 +1,2 @@"
    assert [cell[2].text for cell in ours] == [HUNKS["0001"][("vllm/b.py", 1)], HUNKS["0001"][("vllm/b.py", 2)],
                                              HUNKS["0002"][("vllm/c.py", 1)]]
    assert CONFLICT_DIFF in all_text(rows[1][1])


def test_a_hunk_whose_text_is_not_given_shows_its_header_as_its_text() -> None:
    rows = side_rows(body_of(report_data(), {}))
    texts = [row[0].find(f"{X}pre") for row in rows]
    assert all(pre is not None for pre in texts)
    assert [pre.text for pre in texts] == ["@@ -1,2 +1,2 @@", "@@ -9,1 +9,1 @@", "@@ -4,1 +4,2 @@"]
