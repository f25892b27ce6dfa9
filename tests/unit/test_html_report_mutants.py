"""`pre`: a text as an escaped preformatted block, or a muted "none" when there is no text."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from kvbake.html_report import pre
from tests.unit.test_html_reports import HOSTILE


def test_a_text_is_a_preformatted_block_that_keeps_it_verbatim() -> None:
    value = f"@@ -1 +1 @@\n-a\n+{HOSTILE}\n  indented\n"
    block = ET.fromstring(pre(value))
    assert (block.tag, block.attrib, len(block)) == ("pre", {}, 0)
    assert block.text == value


@pytest.mark.parametrize("value", ["", None], ids=["empty", "absent"])
def test_no_text_is_a_muted_none_span(value: str | None) -> None:
    marker = ET.fromstring(pre(value))
    assert (marker.tag, marker.attrib, len(marker)) == ("span", {"class": "none"}, 0)
    assert marker.text == "none"
