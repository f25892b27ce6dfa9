"""verify-running's --expect: NAME=VALUE items separated by commas (blanks ignored, "" for no switch at all); an item
that is not NAME=VALUE is refused with the form to write."""

from __future__ import annotations

import pytest

from kvbake.errors import PresetError
from kvbake.ship.core.running import parse_expect


def test_items_are_read_and_an_empty_text_expects_no_switch():
    assert parse_expect(" A=1, B=x=y ,,") == {"A": "1", "B": "x=y"}
    assert parse_expect("") == {}


@pytest.mark.parametrize("text", ["A", "=1", "A=", "A=1,B"])
def test_an_item_that_is_not_name_value_is_refused_with_the_form_to_write(text):
    with pytest.raises(PresetError) as failure:
        parse_expect(text)
    assert "is not NAME=VALUE" in failure.value.message
    assert failure.value.fix.startswith('write --expect "NAME=VALUE,NAME=VALUE"') and failure.value.fix.endswith('--expect "" for none')
