"""A well-formed option table document becomes the table (spellings, specs, recorded versions); which tokens are options."""

from __future__ import annotations

import pytest

from kvbake.errors import IntegrityError
from kvbake.serve.core.vllm_options import FLAG, VALUE, OptionSpec, is_option_token, read_option, table_from_document
from message_words import says

OPTIONS = {"--tensor-parallel-size": ["--tensor-parallel-size", VALUE], "-tp": ["--tensor-parallel-size", VALUE],
           "--enforce-eager": ["--enforce-eager", FLAG]}


def document(recordings: object) -> dict:
    return {"format": 1, "options": OPTIONS, "recordings": recordings}


def test_a_well_formed_document_gives_every_spelling_its_spec_and_the_recorded_versions():
    table = table_from_document(document(["0.8.5", "0.9.1"]))
    assert table.versions == ("0.8.5", "0.9.1")
    assert table.spec("-tp") == OptionSpec("--tensor-parallel-size", VALUE)
    assert table.spec("--enforce-eager") == OptionSpec("--enforce-eager", FLAG) and table.spec("--nope") is None
    assert set(table.options) == set(OPTIONS)


def test_a_table_without_recordings_yet_is_well_formed():
    assert table_from_document(document([])).versions == ()


@pytest.mark.parametrize("recordings", [["0.8.5", 9], "0.8.5", None])
def test_recordings_that_are_not_a_list_of_version_strings_are_refused(recordings):
    with pytest.raises(IntegrityError) as failure:
        table_from_document(document(recordings))
    assert says(failure.value.message, "recordings is not a list of vLLM versions")


@pytest.mark.parametrize(("token", "option"), [("-", False), ("--", True), ("-5", False), ("-tp", True), ("model", False)])
def test_a_lone_dash_and_negative_numbers_are_values(token, option):
    assert is_option_token(token, table_from_document(document([]))) is option


def test_a_three_character_long_option_reads_its_underscore_as_a_dash():
    assert read_option("--_", table_from_document(document([]))).name == "---"
