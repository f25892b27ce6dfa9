"""Reading an XHTML report page in tests: an element's tag without its namespace, its children, and its text."""

from __future__ import annotations

import xml.etree.ElementTree as ET

X = "{http://www.w3.org/1999/xhtml}"


def tag(element: ET.Element) -> str:
    return element.tag.rpartition("}")[2]


def children(element: ET.Element) -> list[tuple[str, str | None]]:
    """The element's children as (tag, class)."""
    return [(tag(child), child.get("class")) for child in element]


def loose_text(element: ET.Element) -> str:
    """The text that stands in the element outside its children."""
    return (element.text or "") + "".join(child.tail or "" for child in element)


def all_text(element: ET.Element) -> str:
    return "".join(element.itertext())
