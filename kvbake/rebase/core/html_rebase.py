"""The rebase report as one self-contained XHTML page: each hunk beside the upstream change it meets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbake.html_report import element, page, pre, table, text

KIND = {"clean": "good", "offset": "good", "merged": "warn", "conflict": "bad"}
HunkTexts = Mapping[str, Mapping[tuple[str, int], str]]  # patch id -> (path, hunk number) -> the hunk as the chain states it


def report_html(data: Mapping[str, Any], hunks: HunkTexts) -> str:
    """The page for the report's JSON data; `hunks` gives each hunk's text from the locked chain (absent: not shown)."""
    counts = data["counts"]
    summary = element("ul", "".join(element("li", markup) for markup in (
        text(f"from {data['from']['image']} (config {data['from']['config_digest']})"),
        text(f"to {data['to']['image']} (config {data['to']['config_digest']})"),
        text(f"hunks: {counts['clean']} clean, {counts['offset']} offset, {counts['merged']} merged, "
             f"{counts['conflict']} conflicted"),
        text(f"needs a person: {', '.join(data['needs_person']) or 'none'}"),
        text(f"environment names read on the new base and not before: {', '.join(data['new_switches']) or 'none'}"),
        text(f"declared switches no longer read on the new base: {', '.join(data['unread_switches']) or 'none'}"))))
    files = table(("file", "change", "state"), ([text(f["path"]), text(f["change"]), text(f["state"])] for f in data["files"]),
                  row_classes=["good" if f["state"] == "unchanged" else "warn" for f in data["files"]])
    parts = [summary, element("h2", "Files on the new base"), files]
    for patch in data["patches"]:
        parts += [element("h2", text(f"{patch['id']}: {patch['status']}"), class_=KIND.get(patch["status"])),
                  element("p", element("code", text(patch["file"])))]
        own = hunks.get(patch["id"], {})
        rows = [[element("div", text(f"{h['path']} hunk {h['number']}: {h['status']}"), class_="mark" if h["status"] == "conflict" else None)
                 + element("div", text(_detail(h)), class_="none") + pre(own.get((h["path"], h["number"]), h["header"])),
                 _upstream(h)] for h in patch["hunks"]]
        parts.append(table(("the chain's hunk", "the upstream change it meets"), rows, class_="side",
                           row_classes=[KIND.get(h["status"]) for h in patch["hunks"]]))
    return page(f"Rebase of {data['manifest']}", *parts)


def _detail(hunk: Mapping[str, Any]) -> str:
    if hunk["status"] == "offset":
        return f"{hunk['header']}; applies at line {hunk['line']} ({hunk['offset']:+d} lines)"
    return f"{hunk['header']}" + (f"; {hunk['reason']}" if hunk.get("reason") else "")


def _upstream(hunk: Mapping[str, Any]) -> str:
    upstream = hunk.get("upstream")
    if upstream is None:
        return element("span", "none recorded (the hunk applied as written or moved)" if hunk["status"] in ("clean", "offset")
                       else "none recorded", class_="none")
    lines = ", ".join(str(n) for n in upstream["conflicting_lines"])
    note = element("div", text(f"changes the hunk's old lines {lines}"), class_="none") if lines else ""
    return note + pre(upstream["diff"])
