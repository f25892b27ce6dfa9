"""init's serve description: a drafter's template puts `{max_positions}` only where the positions were read, and a
credential in a shared option is refused with a fix naming the variables that carry a secret instead."""

from __future__ import annotations

import pytest

from kvbake.errors import IntegrityError
from kvbake.serve.core.serve_description import find_drafter, shared_args
from kvbake.serve.core.vllm_argv import parse_serve_args

from message_words import says


def test_only_the_first_positions_entry_of_a_drafter_value_becomes_the_placeholder():
    value = '{"url": "http://d:8100/v1", "max_model_len": 65536, "fallback": {"max_model_len": 65536}}'
    drafter = find_drafter(parse_serve_args(["m", "--speculative-config", value]))
    assert (drafter.option, drafter.url, drafter.max_positions) == ("--speculative-config", "http://d:8100/v1", 65536)
    assert drafter.template == '{"url": "{url}", "max_model_len": {max_positions}, "fallback": {"max_model_len": 65536}}'


def test_a_credential_in_a_shared_option_is_refused_with_a_fix_naming_the_secret_variables():
    with pytest.raises(IntegrityError) as refused:
        shared_args(parse_serve_args(["m", "--hf-overrides", "hf_" + "a" * 34]))
    assert says(refused.value.message, "--hf-overrides")
    assert says(refused.value.fix, "HF_TOKEN") and says(refused.value.fix, "VLLM_API_KEY")
