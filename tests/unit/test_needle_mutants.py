"""Needle prompt edges the mutation run asked about: exact fits, empty layouts, defaults, starts and fixes."""

from __future__ import annotations

import pytest

from kvbake.errors import KvbakeError
from kvbake.operate.core.corpus import chars_for_tokens
from kvbake.operate.core.needle import (
    NEEDLE_QUESTION,
    build_corruption_set,
    build_needle_prompt,
    build_sized_set,
    default_depths,
    find_codes,
    make_needle_codes,
    needle_sentence,
    score_corruption,
)
from message_words import says
from test_needle import CORPUS


def test_a_needle_that_ends_exactly_where_the_question_begins_fits() -> None:
    code = make_needle_codes("edge", 1)[0]
    body_end = chars_for_tokens(200) - len(NEEDLE_QUESTION)
    depth = (body_end - len(needle_sentence(code))) // chars_for_tokens(1)
    assert chars_for_tokens(depth) + len(needle_sentence(code)) == body_end
    prompt = build_needle_prompt(CORPUS, 200, (depth,), (code,))
    assert prompt.text.endswith(needle_sentence(code) + NEEDLE_QUESTION)
    assert prompt.estimated_tokens == 200


def test_a_context_shorter_than_the_question_is_refused_naming_depth_zero() -> None:
    with pytest.raises(KvbakeError) as caught:
        build_needle_prompt(CORPUS, 10, (), ())
    assert type(caught.value) is KvbakeError
    assert says(caught.value.message, "depth 0")
    assert says(caught.value.message, "10-token prompt")


def test_a_needle_prompt_starts_with_the_first_record_by_default() -> None:
    prompt = build_needle_prompt(CORPUS, 400, (200,), make_needle_codes("start", 1))
    assert prompt.text.startswith(CORPUS.documents[0].text)


def test_a_sized_set_places_two_needles_by_default() -> None:
    prompts = build_sized_set(CORPUS, [800, 900], seed="pair")
    assert [len(prompt.codes) for prompt in prompts] == [2, 2]
    assert [prompt.depths for prompt in prompts] == [default_depths(800, 2), default_depths(900, 2)]


def test_a_sized_set_with_three_needles_spreads_them_evenly() -> None:
    prompts = build_sized_set(CORPUS, [800, 900], seed="three", needles=3)
    assert [prompt.depths for prompt in prompts] == [default_depths(800, 3), default_depths(900, 3)]
    assert all(find_codes(prompt.text) == prompt.codes and len(prompt.codes) == 3 for prompt in prompts)


def test_each_prompt_of_a_sized_set_starts_at_its_own_record() -> None:
    first, second = build_sized_set(CORPUS, [800, 800], seed="starts")
    assert first.text.startswith(CORPUS.documents[0].text)
    assert second.text.startswith(CORPUS.documents[1].text)


def test_a_corruption_set_passes_its_needle_count_on() -> None:
    prompts = build_corruption_set(CORPUS, 1200, seed="three", size=2, needles=3)
    assert [len(prompt.codes) for prompt in prompts] == [3, 3]
    assert [prompt.depths for prompt in prompts] == [default_depths(1200, 3)] * 2


def test_a_code_shared_by_two_requests_says_how_to_fix_it() -> None:
    code = make_needle_codes("shared", 1)[0]
    with pytest.raises(KvbakeError) as caught:
        score_corruption([((code,), ""), ((code,), "")])
    assert says(caught.value.fix, "its own codes")
