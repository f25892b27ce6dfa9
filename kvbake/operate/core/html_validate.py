"""The validation report as one self-contained XHTML page: each step's verdict, MemAvailable per node against the floor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvbake.html_report import element, page, table, text
from kvbake.operate.core.validate_plan import STEPS
from kvbake.svg_chart import line_chart

GIB = 1024 ** 3
Reading = tuple[float, str, int]  # seconds since the first sample, node, MemAvailable in bytes
PRESSURE_FIELDS = (("requests", "requests sent"), ("passed", "requests correct"), ("foreign", "foreign codes"),
                   ("prompt_tokens", "prompt tokens"), ("preemptions", "preemptions counted"))
DERIVED_FIELDS = (("admitted_at_least", "admitted together, at least"), ("demand_blocks", "blocks they need"),
                  ("usable_blocks", "usable blocks"), ("pool_blocks", "pool blocks"), ("block_size", "block size (tokens)"),
                  ("max_tokens", "answer tokens each"), ("pool_source", "pool read from"))


def validate_html(data: Mapping[str, Any], readings: Sequence[Reading] = ()) -> str:
    """The page for the report's JSON data and the memory readings the watcher took during the run."""
    stop = data["stop"]
    outcome = (f"STOPPED at {stop['step']}: {stop['reason']}" if stop else "PASSED: every step that ran passed")
    header = table(("", ""), [[text(k), text(v)] for k, v in (
        ("preset", f"{data['preset']} ({data['status']}, max-model-len {data['max_model_len']})"),
        ("endpoint", f"{data['endpoint']} (model {data['model'] or 'unknown'})"), ("release", data["release"].get("text")),
        ("corpus", data["corpus"]), ("run", f"{data['started']} .. {data['finished']}"), ("result", outcome),
        ("rollback", data["rollback"]))], row_classes=[None] * 5 + ["bad" if stop else "good", None])
    return page(f"validate {data['preset']}", header, element("h2", "Steps"), _steps(data["steps"]),
                element("h2", "MemAvailable per node"), _memory(data["memory"], readings), *_pressure(data["steps"]))


def _steps(steps: Sequence[Mapping[str, Any]]) -> str:
    rows, kinds = [], []
    for number, step in enumerate(steps, start=1):
        verdict = "passed" if step["passed"] else "STOPPED" if step["stop"] else "not run"
        failing = "".join(element("div", text(f"FAIL {c['name']}: {c['detail']}")) for c in step["checks"] if not c["passed"])
        stopped = element("div", text(f"stop: {step['stop']}"), class_="mark") if step["stop"] else ""
        rows.append([text(number), text(step["name"]), text(verdict), text(step["summary"]) + stopped + failing])
        kinds.append("good" if step["passed"] else "bad" if step["stop"] else None)
    return table(("", "step", "verdict", "summary"), rows, row_classes=kinds)


def _memory(memory: Mapping[str, Any], readings: Sequence[Reading]) -> str:
    floor = memory["floor_bytes"]
    if not memory["watched"]:
        return element("p", text(f"not watched (no --deploy); floor {floor / GIB:.2f} GiB"), class_="none")
    series: dict[str, list[tuple[float, float]]] = {}
    for seconds, node, available in readings:
        series.setdefault(node, []).append((round(seconds, 1), available / GIB))
    lows = ", ".join(f"{node} {value / GIB:.2f} GiB" for node, value in memory["lowest_bytes"].items()) or "not read"
    note = element("p", text(f"floor {floor / GIB:.2f} GiB; lowest {lows}; {memory['samples']} samples"))
    chart = line_chart(series, "seconds since the first sample", "MemAvailable (GiB)", limit=floor / GIB,
                       limit_label=f"floor {floor / GIB:.2f} GiB", y_format=lambda v: f"{v:.1f}")
    return note + chart


def _pressure(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    step = next((s for s in steps if s["name"] == STEPS[4] and s["ran"]), None)
    if step is None or not step.get("data"):
        return []
    data, derived = step["data"], step["data"].get("derivation") or {}
    rows = [[text(label), text(data[key])] for key, label in PRESSURE_FIELDS if key in data]
    rows += [[text(label), text(derived[key])] for key, label in DERIVED_FIELDS if key in derived]
    return [element("h2", "Pool pressure"), table(("", ""), rows)] + ([element("p", text(data["note"]), class_="none")]
                                                                     if data.get("note") else [])
