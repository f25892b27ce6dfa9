"""A small inline SVG line chart: a polyline per series on shared axes, with labels and an optional limit line."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kvbake.html_report import element, text

SVG = "http://www.w3.org/2000/svg"
COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
LIMIT_COLOUR = "#d62728"
MARKERS = 60  # points drawn as dots when a series has at most this many
LEFT, RIGHT, TOP, BOTTOM = 80, 150, 20, 50
TICKS = 5


def line_chart(series: Mapping[str, Sequence[tuple[float, float]]], x_label: str, y_label: str,
               limit: float | None = None, limit_label: str = "", y_format: Callable[[float], str] = lambda v: f"{v:g}",
               width: int = 720, height: int = 320) -> str:
    """An `<svg>` element: each named series of (x, y) points as a polyline; `limit` a dashed horizontal line."""
    points = [p for values in series.values() for p in values]
    xs = [x for x, _ in points] or [0.0]
    ys = [y for _, y in points] + ([limit] if limit is not None else []) or [0.0]
    x_low, x_high = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y_low, y_high = 0.0, max(max(ys) * 1.1, 1.0)
    inner_w, inner_h = width - LEFT - RIGHT, height - TOP - BOTTOM

    def at(x: float, y: float) -> tuple[float, float]:
        return (LEFT + (x - x_low) / (x_high - x_low) * inner_w, TOP + inner_h - (y - y_low) / (y_high - y_low) * inner_h)

    parts = [_line(LEFT, TOP, LEFT, TOP + inner_h, "#444"), _line(LEFT, TOP + inner_h, LEFT + inner_w, TOP + inner_h, "#444")]
    for tick in range(TICKS + 1):
        value = y_low + (y_high - y_low) * tick / TICKS
        _, y = at(x_low, value)
        parts += [_line(LEFT - 4, y, LEFT + inner_w, y, "#ddd"), _label(LEFT - 8, y + 4, y_format(value), "end")]
        x_value = x_low + (x_high - x_low) * tick / TICKS
        x, _ = at(x_value, y_low)
        parts.append(_label(x, TOP + inner_h + 16, f"{x_value:g}", "middle"))
    parts += [_label(LEFT + inner_w / 2, height - 8, x_label, "middle"),
              element("text", text(y_label), x="14", y=f"{TOP + inner_h / 2:.1f}", transform=f"rotate(-90 14 {TOP + inner_h / 2:.1f})",
                      **{"text-anchor": "middle", "font-size": "12"})]
    if limit is not None:
        _, y = at(x_low, limit)
        parts += [element("line", x1=f"{LEFT}", y1=f"{y:.1f}", x2=f"{LEFT + inner_w}", y2=f"{y:.1f}", stroke=LIMIT_COLOUR,
                          **{"stroke-dasharray": "6 4", "stroke-width": "1.5"}),
                  _label(LEFT + inner_w + 6, y + 4, limit_label or y_format(limit), "start", LIMIT_COLOUR)]
    for number, (name, values) in enumerate(series.items()):
        colour = COLOURS[number % len(COLOURS)]
        placed = [at(x, y) for x, y in values]
        parts.append(element("polyline", points=" ".join(f"{x:.1f},{y:.1f}" for x, y in placed), fill="none", stroke=colour,
                             **{"stroke-width": "2"}))
        if len(placed) <= MARKERS:
            parts += [element("circle", cx=f"{x:.1f}", cy=f"{y:.1f}", r="2.5", fill=colour) for x, y in placed]
        parts.append(_label(LEFT + inner_w + 6, TOP + 14 + 16 * number, name, "start", colour))
    if not points:
        parts.append(_label(LEFT + inner_w / 2, TOP + inner_h / 2, "no samples recorded", "middle"))
    return element("svg", "".join(parts), xmlns=SVG, width=str(width), height=str(height),
                   viewBox=f"0 0 {width} {height}", role="img")


def _line(x1: float, y1: float, x2: float, y2: float, colour: str) -> str:
    return element("line", x1=f"{x1:.1f}", y1=f"{y1:.1f}", x2=f"{x2:.1f}", y2=f"{y2:.1f}", stroke=colour)


def _label(x: float, y: float, value: str, anchor: str, colour: str = "#222") -> str:
    return element("text", text(value), x=f"{x:.1f}", y=f"{y:.1f}", fill=colour, **{"text-anchor": anchor, "font-size": "12"})
