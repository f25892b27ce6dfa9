"""How a number is shown in a one-line message: with separators, or by its digit count when huge."""

from __future__ import annotations

from kvbake.kvarith.limits import shown
from tests.unit.message_words import says


def test_a_number_of_13_999_bits_is_named_by_its_exact_digit_count() -> None:
    value = (1 << 13_999) - 1
    assert says(shown(value), f"{len(str(value))}-digit")
    assert not says(shown(value), "about")


def test_a_number_of_14_000_bits_is_named_by_an_estimated_digit_count() -> None:
    assert says(shown(1 << 13_999), "about 4214-digit")
    assert says(shown(-(1 << 13_999)), "negative about 4214-digit")


def test_zero_and_small_numbers_are_shown_as_they_are() -> None:
    assert [shown(0), shown(-1), shown(1_234_567)] == ["0", "-1", "1,234,567"]
