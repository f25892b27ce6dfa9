"""--pressure at its edges: the chunk boundaries that decide a window's span, one-token lengths, tiny pools."""

from __future__ import annotations

import pytest

from kvbake.errors import KvArithError
from kvbake.kvarith.pressure import deciding_ends, parse_mix, pool_for_test, window_span


def test_the_deciding_ends_are_the_last_boundary_below_the_window_and_one_period_from_it() -> None:
    # chunk 100, window 250 tokens, block 64: boundary 200 is the last below 250, and from 300 on the span
    # repeats with the end modulo 64, whose period is 16 chunks
    assert deciding_ends(10_000, 100, 250, 64) == [k * 100 for k in range(2, 19)] + [10_000]


@pytest.mark.parametrize(("prompt", "expected"), [(3000, [2048, 3000]), (2049, [2048, 2049])])
def test_a_prompt_shorter_than_the_window_is_decided_by_its_last_boundary_and_its_end(prompt, expected) -> None:
    assert deciding_ends(prompt, 2048, 10_000, 64) == expected


@pytest.mark.parametrize(("prompt", "chunk", "held", "block"), [
    (10_000, 100, 250, 64), (5000, 96, 700, 32), (2049, 2048, 10_000, 64), (7777, 333, 1000, 128),
])
def test_the_deciding_ends_find_the_widest_span_over_every_boundary(prompt, chunk, held, block) -> None:
    every = list(range(chunk, prompt, chunk)) + [prompt]
    widest = max(window_span(end, min(held, end), block) for end in every)
    assert max(window_span(end, min(held, end), block) for end in deciding_ends(prompt, chunk, held, block)) == widest


def test_a_window_from_the_first_token_covers_every_block_up_to_its_end() -> None:
    assert window_span(5, 10, 1) == 5
    assert window_span(5, 3, 1) == 3


def test_a_length_of_one_token_and_doubled_underscores_are_read() -> None:
    assert parse_mix("1") == ((1, 1),)
    assert parse_mix("150__000x2") == ((150_000, 2),)


def test_a_one_byte_pool_is_a_pool() -> None:
    assert pool_for_test(1, None, 100) == 1


def test_memory_available_exactly_the_pool_below_the_floor_leaves_no_pool() -> None:
    with pytest.raises(KvArithError):
        pool_for_test(100, 50, 150)
    assert pool_for_test(100, 51, 150) == 1
