"""The rebase page's hunk cells: each hunk's detail line, and the upstream cell's elements, classes and words per hunk status."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from kvbake.rebase.core.html_rebase import report_html
from kvbake.rebase.core.report import HunkReport, PatchReport, RebaseReport, report_json
from kvbake.rebase.core.upstream import UpstreamOverlap, UpstreamRegion
from tests.unit.message_words import says
from tests.unit.test_html_reports import HOSTILE, X, parsed
from tests.unit.xhtml_reading import children, loose_text, tag

APPLIED_AS_WRITTEN = "none recorded (the hunk applied as written or moved)"
TWO_LINES = UpstreamOverlap((UpstreamRegion(3, ("old three",), 3, (f"new {HOSTILE}",)),
                             UpstreamRegion(7, ("old seven",), 7, ("new seven",))), (3, 7))
NEARBY = UpstreamOverlap((UpstreamRegion(5, (), 5, ("inserted",)),), ())


def hunk_cells(*hunks: HunkReport) -> list[list[ET.Element]]:
    """Each hunk's row on the page, as its two cells (the chain's hunk, the upstream change it meets)."""
    report = RebaseReport("manifest.yaml", "base:1", "sha256:a", "base:2", "sha256:b", (),
                          (PatchReport("0077", "patches/0077.patch", hunks),))
    root = parsed(report_html(report_json(report), {}))
    rows = root.findall(f"{X}body/{X}table[@class='side']/{X}tbody/{X}tr")
    assert len(rows) == len(hunks)
    return [row.findall(f"{X}td") for row in rows]


@pytest.mark.parametrize("hunk", [HunkReport("v/x.py", 1, "@@ -1,2 +1,2 @@", "clean"),
                                  HunkReport("v/x.py", 1, "@@ -1,2 +1,2 @@", "offset", offset=4, line=5)],
                         ids=["clean", "offset"])
def test_a_hunk_that_applied_says_in_a_muted_span_that_it_met_no_upstream_change(hunk: HunkReport) -> None:
    [[_, upstream]] = hunk_cells(hunk)
    assert children(upstream) == [("span", "none")] and loose_text(upstream) == ""
    assert says(upstream[0].text, APPLIED_AS_WRITTEN)


@pytest.mark.parametrize("hunk", [HunkReport("v/x.py", 2, "@@ -3,1 +3,1 @@", "merged"),
                                  HunkReport("v/x.py", 2, "@@ -3,1 +3,1 @@", "conflict", reason="the file is gone")],
                         ids=["merged", "conflict"])
def test_a_merged_or_conflicted_hunk_without_an_upstream_change_says_only_none_recorded(hunk: HunkReport) -> None:
    [[_, upstream]] = hunk_cells(hunk)
    assert children(upstream) == [("span", "none")] and loose_text(upstream) == ""
    assert says(upstream[0].text, "none recorded") and "applied as written" not in upstream[0].text


def test_an_upstream_change_names_the_old_lines_it_changes_in_a_muted_line_above_its_diff() -> None:
    [[_, upstream]] = hunk_cells(HunkReport("v/x.py", 2, "@@ -3,5 +3,5 @@", "conflict", upstream=TWO_LINES,
                                            reason="both sides change these lines"))
    assert children(upstream) == [("div", "none"), ("pre", None)] and loose_text(upstream) == ""
    note, diff = upstream
    assert says(note.text, "old lines 3, 7")
    assert diff.text == TWO_LINES.as_diff() and f"+new {HOSTILE}\n" in diff.text


def test_an_upstream_change_that_touches_none_of_the_old_lines_shows_its_diff_alone() -> None:
    [[_, upstream]] = hunk_cells(HunkReport("v/x.py", 3, "@@ -4,3 +4,3 @@", "merged", upstream=NEARBY))
    assert children(upstream) == [("pre", None)] and loose_text(upstream) == ""
    assert upstream[0].text == NEARBY.as_diff()


def test_an_upstream_change_without_regions_shows_a_muted_none() -> None:
    [[_, upstream]] = hunk_cells(HunkReport("v/x.py", 3, "@@ -4,3 +4,3 @@", "merged", upstream=UpstreamOverlap((), ())))
    assert children(upstream) == [("span", "none")] and loose_text(upstream) == "" and upstream[0].text == "none"


def test_the_detail_line_of_a_hunk_without_a_reason_is_its_header_alone() -> None:
    [[ours, _]] = hunk_cells(HunkReport("v/x.py", 1, "@@ -1,2 +1,2 @@", "clean"))
    assert children(ours)[:2] == [("div", None), ("div", "none")]
    assert ours[1].text == "@@ -1,2 +1,2 @@"


def test_the_detail_line_of_a_hunk_with_a_reason_adds_it_after_the_header() -> None:
    [[ours, _]] = hunk_cells(HunkReport("v/x.py", 2, "@@ -3,1 +3,1 @@", "conflict", reason=f"both sides change {HOSTILE}"))
    assert ours[1].text == f"@@ -3,1 +3,1 @@; both sides change {HOSTILE}"
