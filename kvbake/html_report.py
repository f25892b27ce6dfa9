"""Self-contained XHTML pages built from plain data: escaped text, tables, a page shell; no script, nothing fetched."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from xml.sax.saxutils import escape

XHTML = "http://www.w3.org/1999/xhtml"
STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #eee; }
pre { margin: 0; font-size: 0.85em; white-space: pre-wrap; }
.good { background: #e3f4e1; } .warn { background: #fff4d6; } .bad { background: #fbe0e0; } .none { color: #888; }
.side td { width: 50%; }
.mark { font-weight: bold; color: #a00; }
"""


def text(value: object) -> str:
    """A value as escaped text; None is a dash."""
    return "-" if value is None else escape(str(value))


def attribute(value: object) -> str:
    return escape(str(value), {'"': "&quot;"})


def element(tag: str, content: str = "", **attributes: object) -> str:
    """`<tag ...>content</tag>`; `content` is markup already (escape text with `text`). `class_` writes `class`."""
    attrs = "".join(f' {name.rstrip("_")}="{attribute(value)}"' for name, value in attributes.items() if value is not None)
    return f"<{tag}{attrs}>{content}</{tag}>"


def pre(value: str | None) -> str:
    return element("pre", text(value)) if value else element("span", "none", class_="none")


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], class_: str | None = None,
          row_classes: Sequence[str | None] | None = None) -> str:
    """A table of markup cells under escaped headers; each row may take a class (good, warn, bad)."""
    rows = list(rows)
    classes = list(row_classes) if row_classes is not None else [None] * len(rows)
    head = element("tr", "".join(element("th", text(h)) for h in headers))
    body = "".join(element("tr", "".join(element("td", cell) for cell in row), class_=kind) for row, kind in zip(rows, classes))
    return element("table", element("thead", head) + element("tbody", body), class_=class_)


def page(title: str, *parts: str) -> str:
    """The whole document: an XHTML page with its inline style and the parts (markup) in order."""
    head = element("head", '<meta charset="utf-8"/>' + element("title", text(title)) + element("style", escape(STYLE)))
    body = element("body", element("h1", text(title)) + "".join(parts))
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n<html xmlns="{XHTML}">{head}{body}</html>\n'
