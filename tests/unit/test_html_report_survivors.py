"""The page shell, tables and attributes of kvbake's XHTML reports, byte for byte: quotes escaped in attributes, an
empty element by default, a charset and an inline style in the head, cells and rows joined with nothing between."""

from __future__ import annotations

from xml.sax.saxutils import escape

from kvbake.html_report import STYLE, XHTML, attribute, element, page, table


def test_an_attribute_value_escapes_its_quotes_and_markup():
    assert attribute('say "hi" <b> & go') == "say &quot;hi&quot; &lt;b&gt; &amp; go"
    assert element("td", "x", title='a "b"') == '<td title="a &quot;b&quot;">x</td>'


def test_an_element_without_content_is_empty():
    assert element("br") == "<br></br>"


def test_only_the_trailing_underscore_of_an_attribute_name_is_dropped():
    assert element("p", "t", class_="good", data_X="1") == '<p class="good" data_X="1">t</p>'


def test_a_table_joins_its_header_cells_and_rows_with_nothing_between():
    markup = table(["a", "b"], [["1", "2"], ["3", "4"]], row_classes=["good", None])
    assert markup == ("<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody>"
                      '<tr class="good"><td>1</td><td>2</td></tr><tr><td>3</td><td>4</td></tr></tbody></table>')


def test_a_page_declares_its_charset_carries_its_style_and_keeps_its_parts_in_order():
    document = page("T & U", "<p>one</p>", "<p>two</p>")
    head = f'<head><meta charset="utf-8"/><title>T &amp; U</title><style>{escape(STYLE)}</style></head>'
    body = "<body><h1>T &amp; U</h1><p>one</p><p>two</p></body>"
    assert document == f'<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n<html xmlns="{XHTML}">{head}{body}</html>\n'
