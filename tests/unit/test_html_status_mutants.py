"""The status page's shape: its title, headers and heading, each cell's elements and classes, each row's class, and the
marks (a node's diverged mark among them, while its ranks agree again)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from fake_fleet import CONTROL, deploy, make_world
from kvbake.ship.adapters import status as fleet_status
from kvbake.ship.adapters.nodestate import NodeState
from kvbake.ship.core.html_status import status_html
from tests.unit.message_words import says
from tests.unit.test_html_reports import X, parsed, release
from tests.unit.xhtml_reading import children, loose_text, tag

HEADERS = ["node", "role", "current release", "previous release", "runs", "switches"]


def node(**fields: object) -> dict:
    """A node's row as `status --json` prints it: by default running its recorded current release, with no switches."""
    row = {"node": "spark-a", "role": "head", "current": release("r1", "control"), "recorded_current_missing": False,
           "previous": release("r0", "packing"), "running": True, "running_layers": 3, "running_matches_current": True,
           "switches": {}}
    row.update(fields)
    return row


def status(*nodes: dict, diverged: bool = False, marked: dict | None = None, pending: str | None = None) -> ET.Element:
    return parsed(status_html({"nodes": list(nodes), "diverged": diverged, "marked_diverged": marked,
                               "pending_journal": pending}))


def cells(root: ET.Element) -> list[list[ET.Element]]:
    return [row.findall(f"{X}td") for row in root.findall(f"{X}body/{X}table/{X}tbody/{X}tr")]


def body(root: ET.Element) -> ET.Element:
    return root.find(f"{X}body")


def test_the_page_is_titled_and_heads_its_columns_and_its_marks() -> None:
    root = status(node())
    assert root.find(f"{X}head/{X}title").text == "kvbake status"
    assert body(root).find(f"{X}h1").text == "kvbake status"
    assert [th.text for th in root.findall(f"{X}body/{X}table/{X}thead/{X}tr/{X}th")] == HEADERS
    assert [tag(child) for child in body(root)] == ["h1", "table", "h2", "p"]
    assert [(h.text, len(h)) for h in body(root).findall(f"{X}h2")] == [("Marks", 0)]


@pytest.mark.parametrize(("fields", "kind"), [
    ({}, "good"),
    ({"running": False}, "warn"),
    ({"current": None, "previous": None}, "warn"),
    ({"running_matches_current": False}, "bad"),
    ({"running": False, "running_matches_current": False}, "bad"),
    ({"running": False, "recorded_current_missing": True}, "bad"),
])
def test_each_row_is_classed_good_warn_or_bad(fields: dict, kind: str) -> None:
    root = status(node(**fields))
    assert [tr.get("class") for tr in root.findall(f"{X}body/{X}table/{X}tbody/{X}tr")] == [kind]


def test_the_node_and_role_cells_name_them() -> None:
    [row] = cells(status(node(node="spark-b", role="worker")))
    assert (row[0].text, row[1].text) == ("spark-b", "worker")


@pytest.mark.parametrize(("running", "matches", "said"), [(True, True, "yes"), (False, True, "no"),
                                                          (True, False, "yes"), (False, False, "no")])
def test_the_runs_cell_says_yes_or_no_and_flags_another_release(running: bool, matches: bool, said: str) -> None:
    [row] = cells(status(node(running=running, running_matches_current=matches)))
    runs = row[4].text
    if matches:
        assert runs == said
    else:
        assert runs.split()[0] == said and says(runs, "not the current release")


def test_the_switches_cell_has_a_div_per_switch_in_name_order() -> None:
    [row] = cells(status(node(switches={"VLLM_B": "2", "VLLM_A": "1"})))
    switches = row[5]
    assert children(switches) == [("div", None), ("div", None)]
    assert [div.text for div in switches] == ["VLLM_A=1", "VLLM_B=2"]
    assert loose_text(switches) == ""


def test_a_node_without_switches_shows_a_dimmed_none() -> None:
    [row] = cells(status(node(switches={})))
    assert children(row[5]) == [("span", "none")]
    assert row[5][0].text == "(none)" and loose_text(row[5]) == ""


def test_a_release_cell_shows_its_id_in_bold_its_preset_and_when_and_by_whom_it_was_deployed() -> None:
    [row] = cells(status(node(current=release("r1", "control") | {"deployed_at": "2026-02-03T04:05:06Z", "deployed_by": "alice"})))
    current = row[2]
    assert children(current) == [("div", None), ("div", "none")]
    first, when = current
    assert children(first) == [("strong", None)] and first[0].text == "r1"
    assert says(first[0].tail, "(control)")
    assert says(when.text, "2026-02-03T04:05:06Z") and says(when.text, "alice") and len(when) == 0
    assert loose_text(current) == ""


def test_a_release_never_deployed_has_no_deployed_line() -> None:
    [row] = cells(status(node(current=release("r1", "control") | {"deployed_at": None, "deployed_by": None})))
    assert children(row[2]) == [("div", None)]
    assert loose_text(row[2]) == ""


def test_an_absent_release_is_a_dimmed_dash() -> None:
    [row] = cells(status(node(previous=None)))
    assert children(row[3]) == [("span", "none")]
    assert row[3][0].text == "-" and loose_text(row[3]) == ""


def test_a_recorded_current_release_gone_from_the_node_is_marked_under_it() -> None:
    [row] = cells(status(node(recorded_current_missing=True)))
    assert children(row[2]) == [("div", None), ("div", "none"), ("div", "mark")]
    assert says(row[2][2].text, "no longer on the node")


def test_a_current_release_still_on_the_node_has_no_mark() -> None:
    [row] = cells(status(node(running=False)))
    assert children(row[2]) == [("div", None), ("div", "none")]
    assert loose_text(row[2]) == ""


def marks(root: ET.Element) -> ET.Element:
    [found] = body(root).findall(f"{X}ul")
    return found


def test_a_divergence_is_a_marked_item_and_its_recorded_repair_follows_it() -> None:
    bare = marks(status(diverged=True))
    repaired = marks(status(diverged=True, marked={"repair": "deploy --revert"}))
    for listed in (bare, repaired):
        assert children(listed) == [("li", "mark")]
    assert says(bare[0].text, "DIVERGED") and "repair" not in bare[0].text
    assert repaired[0].text.startswith(bare[0].text)
    assert repaired[0].text[len(bare[0].text):] == "; repair: deploy --revert"


def test_a_pending_journal_is_a_marked_item_naming_it() -> None:
    listed = marks(status(pending="j-7"))
    assert children(listed) == [("li", "mark")]
    assert says(listed[0].text, "j-7")


def test_both_marks_are_items_of_one_list() -> None:
    root = status(diverged=True, pending="j-7")
    assert [tag(child) for child in body(root)] == ["h1", "table", "h2", "ul"]
    listed = marks(root)
    assert children(listed) == [("li", "mark"), ("li", "mark")]
    assert loose_text(listed) == ""


def test_a_fleet_without_marks_says_so_in_a_paragraph() -> None:
    root = status(node())
    assert body(root).find(f"{X}ul") is None
    [paragraph] = body(root).findall(f"{X}p")
    assert says(paragraph.text, "none")


def test_a_node_marked_diverged_shows_diverged_on_the_page_though_its_ranks_agree_now(tmp_path, monkeypatch) -> None:
    """The mark stays until its repair runs: ranks that agree again do not clear it."""
    world = make_world(tmp_path, monkeypatch)
    deploy(world, CONTROL)
    NodeState("b", world.engines["b"]).update("base:1", "diverged", diverged={"by": "ops@h1", "repair": "deploy --revert"})
    data = fleet_status.status(world.fleet)
    assert data["diverged"] is False, "the ranks agree"
    listed = marks(parsed(status_html(data)))
    assert children(listed) == [("li", "mark")]
    assert says(listed[0].text, "DIVERGED") and listed[0].text.endswith("; repair: deploy --revert")
