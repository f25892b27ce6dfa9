"""The fleet's status as one self-contained XHTML page: a row per node, and the fleet's marks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbake.html_report import element, page, table, text


def status_html(data: Mapping[str, Any]) -> str:
    """The page for `status`'s data (as `--json` prints it): releases, switches, what runs, divergence, a pending journal."""
    rows, kinds = [], []
    for row in data["nodes"]:
        matches = row["running_matches_current"] or not row["current"]
        running = ("yes" if row["running"] else "no") + ("" if matches else " (not the current release)")
        missing = element("div", "recorded current release no longer on the node", class_="mark") if row["recorded_current_missing"] else ""
        switches = "".join(element("div", text(f"{name}={value}")) for name, value in sorted(row["switches"].items()))
        rows.append([text(row["node"]), text(row["role"]), _release(row["current"]) + missing, _release(row["previous"]),
                     text(running), switches or element("span", "(none)", class_="none")])
        kinds.append("good" if row["running"] and matches and row["current"] else "bad" if not matches or missing else "warn")
    marks = _marks(data)
    return page("kvbake status", table(("node", "role", "current release", "previous release", "runs", "switches"), rows,
                                       row_classes=kinds), element("h2", "Marks"), marks)


def _release(release: Mapping[str, Any] | None) -> str:
    if release is None:
        return element("span", "-", class_="none")
    when = f"deployed {release.get('deployed_at')} by {release.get('deployed_by')}" if release.get("deployed_at") else ""
    return (element("div", element("strong", text(release["id"])) + " " + text(f"({release['preset']})"))
            + (element("div", text(when), class_="none") if when else ""))


def _marks(data: Mapping[str, Any]) -> str:
    items = []
    if data["diverged"] or data["marked_diverged"]:
        repair = f"; repair: {data['marked_diverged']['repair']}" if data["marked_diverged"] else ""
        items.append(element("li", text(f"DIVERGED: the ranks do not agree{repair}"), class_="mark"))
    if data["pending_journal"]:
        items.append(element("li", text(f"interrupted: {data['pending_journal']}; run deploy --resume or deploy --revert"),
                             class_="mark"))
    return element("ul", "".join(items)) if items else element("p", "none: the ranks agree and no transition is pending")
