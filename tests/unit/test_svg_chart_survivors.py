"""The SVG line chart's series: each polyline's stroke, its dots up to the marker limit, the legend beside the plot,
the dashed limit line's width, the empty chart's note and the markup between the elements."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from kvbake.svg_chart import COLOURS, MARKERS, line_chart

from test_svg_chart_mutants import NS, PLOT_BOTTOM, PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, chart, numbers, texts

TWO = {"first": [(0, 1.0), (4, 2.0)], "second": [(1, 0.5), (3, 3.0)]}


def legend(svg: ET.Element) -> list[ET.Element]:
    """The series names: the texts after the tick labels and the two axis titles (no limit drawn)."""
    return texts(svg)[14:]


def test_each_series_is_an_unfilled_two_pixel_line_in_its_own_colour() -> None:
    polylines = chart(TWO).findall(f"{NS}polyline")
    assert [(p.get("fill"), p.get("stroke"), p.get("stroke-width")) for p in polylines] == [
        ("none", COLOURS[0], "2"), ("none", COLOURS[1], "2")]


def test_each_point_is_a_dot_of_radius_two_and_a_half_in_its_series_colour() -> None:
    circles = chart(TWO).findall(f"{NS}circle")
    assert [(c.get("r"), c.get("fill")) for c in circles] == [("2.5", COLOURS[0])] * 2 + [("2.5", COLOURS[1])] * 2


@pytest.mark.parametrize(("count", "dots"), [(MARKERS, MARKERS), (MARKERS + 1, 0)])
def test_a_series_gets_dots_up_to_the_marker_limit_and_none_beyond(count: int, dots: int) -> None:
    svg = chart({"a": [(float(i), 1.0) for i in range(count)]})
    assert len(svg.findall(f"{NS}circle")) == dots
    assert len(svg.find(f"{NS}polyline").get("points").split()) == count


def test_each_series_is_named_right_of_the_plot_one_line_apart_in_its_colour() -> None:
    names = legend(chart(TWO))
    assert [n.text for n in names] == ["first", "second"]
    assert [numbers(n, "x", "y") for n in names] == [(PLOT_RIGHT + 6, PLOT_TOP + 14), (PLOT_RIGHT + 6, PLOT_TOP + 30)]
    assert [(n.get("text-anchor"), n.get("fill"), n.get("font-size")) for n in names] == [
        ("start", COLOURS[0], "12"), ("start", COLOURS[1], "12")]


def test_the_limit_line_is_one_and_a_half_pixels_wide() -> None:
    limit_line = chart({"a": [(0, 1.0)]}, limit=2.0).findall(f"{NS}line")[-1]
    assert limit_line.get("stroke-width") == "1.5"


def test_a_chart_without_samples_says_so_in_the_middle_of_the_plot() -> None:
    note = texts(chart({}))[-1]
    assert note.text == "no samples recorded"
    assert numbers(note, "x", "y") == ((PLOT_LEFT + PLOT_RIGHT) / 2, (PLOT_TOP + PLOT_BOTTOM) / 2)
    assert (note.get("text-anchor"), note.get("fill")) == ("middle", "#222")


@pytest.mark.parametrize("series", [TWO, {}])
def test_the_elements_follow_each_other_with_no_text_between_them(series: dict) -> None:
    svg = ET.fromstring(line_chart(series, "seconds", "GiB", limit=1.0))
    assert svg.text is None
    assert [child.tail for child in svg] == [None] * len(svg)
