"""The SVG line chart's geometry: its size, axes, grid and tick labels, axis titles, limit line and where each point lands."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from kvbake.svg_chart import LIMIT_COLOUR, line_chart

NS = "{http://www.w3.org/2000/svg}"
# the default 720 x 320 chart: the plot spans x 80..570 and y 20..270
PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM = 80.0, 570.0, 20.0, 270.0
TICK_YS = [270.0, 220.0, 170.0, 120.0, 70.0, 20.0]  # the grid lines, bottom to top
TICK_XS = [80.0, 178.0, 276.0, 374.0, 472.0, 570.0]  # the x tick labels, left to right


def chart(series: dict, **options: object) -> ET.Element:
    return ET.fromstring(line_chart(series, "seconds", "GiB", **options))


def numbers(element: ET.Element, *names: str) -> tuple[float, ...]:
    return tuple(float(element.get(name)) for name in names)


def texts(svg: ET.Element) -> list[ET.Element]:
    return svg.findall(f"{NS}text")


def tick_labels(svg: ET.Element) -> tuple[list[ET.Element], list[ET.Element]]:
    """The y tick labels and the x tick labels, drawn in turn, one pair a tick, before the axis titles."""
    ticks = texts(svg)[:12]
    return ticks[0::2], ticks[1::2]


def test_the_chart_is_720_by_320_unless_told() -> None:
    svg = chart({"a": [(0, 1.0)]})
    assert (svg.tag, svg.get("width"), svg.get("height"), svg.get("viewBox"), svg.get("role")) == (
        f"{NS}svg", "720", "320", "0 0 720 320", "img")


def test_the_axes_run_along_the_left_and_the_bottom_of_the_plot() -> None:
    lines = chart({"a": [(0, 1.0), (4, 2.0)]}).findall(f"{NS}line")
    assert [numbers(line, "x1", "y1", "x2", "y2") + (line.get("stroke"),) for line in lines[:2]] == [
        (PLOT_LEFT, PLOT_TOP, PLOT_LEFT, PLOT_BOTTOM, "#444"),
        (PLOT_LEFT, PLOT_BOTTOM, PLOT_RIGHT, PLOT_BOTTOM, "#444")]


def test_six_grid_lines_reach_from_a_tick_left_of_the_axis_across_the_plot() -> None:
    lines = chart({"a": [(0, 1.0), (4, 2.0)]}).findall(f"{NS}line")
    assert len(lines) == 2 + 6
    assert [numbers(line, "x1", "y1", "x2", "y2") + (line.get("stroke"),) for line in lines[2:]] == [
        (PLOT_LEFT - 4, y, PLOT_RIGHT, y, "#ddd") for y in TICK_YS]


@pytest.mark.parametrize(("series", "values"), [
    ({"a": [(0, 0.5)]}, ["0", "0.2", "0.4", "0.6", "0.8", "1"]),  # the scale reaches 1 at least
    ({"a": [(0, 20.0), (1, 50.0)]}, ["0", "11", "22", "33", "44", "55"]),  # 10% above the highest value
    ({}, ["0", "0.2", "0.4", "0.6", "0.8", "1"]),  # no samples: a unit scale
])
def test_the_y_ticks_run_from_zero_to_a_tenth_above_the_highest_value(series: dict, values: list[str]) -> None:
    y_ticks, _ = tick_labels(chart(series))
    assert [t.text for t in y_ticks] == values
    assert [numbers(t, "x", "y") for t in y_ticks] == [(PLOT_LEFT - 8, y + 4) for y in TICK_YS]
    assert {(t.get("text-anchor"), t.get("font-size"), t.get("fill")) for t in y_ticks} == {("end", "12", "#222")}


def test_the_y_ticks_use_the_given_format() -> None:
    y_ticks, _ = tick_labels(chart({"a": [(0, 50.0)]}, y_format=lambda v: f"{v:.1f}"))
    assert [t.text for t in y_ticks] == ["0.0", "11.0", "22.0", "33.0", "44.0", "55.0"]


@pytest.mark.parametrize(("series", "values"), [
    ({"a": [(10, 1.0), (20, 2.0)]}, ["10", "12", "14", "16", "18", "20"]),
    ({"a": [(15, 1.0)], "b": [(10, 1.0), (12, 3.0)]}, ["10", "11", "12", "13", "14", "15"]),  # the range of all series
    ({"a": [(5, 1.0), (5, 2.0)]}, ["5", "5.2", "5.4", "5.6", "5.8", "6"]),  # one x value: a unit range from it
    ({}, ["0", "0.2", "0.4", "0.6", "0.8", "1"]),  # no samples: 0 to 1
])
def test_the_x_ticks_divide_the_range_of_x_in_five(series: dict, values: list[str]) -> None:
    _, x_ticks = tick_labels(chart(series))
    assert [t.text for t in x_ticks] == values
    assert [numbers(t, "x", "y") for t in x_ticks] == [(x, PLOT_BOTTOM + 16) for x in TICK_XS]
    assert {(t.get("text-anchor"), t.get("font-size"), t.get("fill")) for t in x_ticks} == {("middle", "12", "#222")}


def test_the_axis_titles_sit_below_the_plot_and_rotated_left_of_it() -> None:
    svg = chart({"a": [(0, 1.0), (4, 2.0)]})
    x_title, y_title = texts(svg)[12:14]
    assert x_title.text == "seconds"
    assert numbers(x_title, "x", "y") == ((PLOT_LEFT + PLOT_RIGHT) / 2, 312.0)
    assert (x_title.get("text-anchor"), x_title.get("font-size")) == ("middle", "12")
    assert (y_title.tag, y_title.text) == (f"{NS}text", "GiB")
    assert (y_title.get("x"), y_title.get("y"), y_title.get("transform")) == ("14", "145.0", "rotate(-90 14 145.0)")
    assert (y_title.get("text-anchor"), y_title.get("font-size")) == ("middle", "12")


def test_the_axes_grid_and_titles_stay_when_the_series_are_drawn() -> None:
    svg = chart({"a": [(0, 1.0), (4, 2.0)]}, limit=1.0)
    assert len(svg.findall(f"{NS}line")) == 2 + 6 + 1
    assert [t.text for t in texts(svg)][12:15] == ["seconds", "GiB", "1"]


def test_each_point_is_placed_by_its_share_of_the_ranges() -> None:
    svg = chart({"a": [(10, 0.0), (15, 27.5), (20, 50.0)]})
    placed = [(PLOT_LEFT, PLOT_BOTTOM), (325.0, 145.0), (PLOT_RIGHT, 42.7)]
    (polyline,) = svg.findall(f"{NS}polyline")
    assert [tuple(float(v) for v in pair.split(",")) for pair in polyline.get("points").split()] == placed
    assert [numbers(dot, "cx", "cy") for dot in svg.findall(f"{NS}circle")] == placed


@pytest.mark.parametrize(("options", "top", "label"), [({}, "11", "10"), ({"y_format": lambda v: f"{v:.2f}"}, "11.00", "10.00"),
                                                       ({"limit_label": "floor"}, "11", "floor")])
def test_a_limit_above_the_samples_widens_the_scale_and_is_labelled(options: dict, top: str, label: str) -> None:
    svg = chart({"a": [(0, 1.0), (4, 2.0)]}, limit=10.0, **options)
    y_ticks, _ = tick_labels(svg)
    assert y_ticks[-1].text == top
    limit_line = svg.findall(f"{NS}line")[-1]
    assert (limit_line.get("stroke"), limit_line.get("stroke-dasharray")) == (LIMIT_COLOUR, "6 4")
    assert numbers(limit_line, "x1", "y1", "x2", "y2") == (PLOT_LEFT, 42.7, PLOT_RIGHT, 42.7)
    limit_text = texts(svg)[14]
    assert (limit_text.text, limit_text.get("fill"), limit_text.get("text-anchor")) == (label, LIMIT_COLOUR, "start")
    assert numbers(limit_text, "x", "y") == (PLOT_RIGHT + 6, 46.7)


def test_a_chart_without_samples_or_limit_still_draws_its_frame() -> None:
    svg = chart({})
    assert len(svg.findall(f"{NS}line")) == 2 + 6
    assert [t.text for t in texts(svg)][12:] == ["seconds", "GiB", "no samples recorded"]
