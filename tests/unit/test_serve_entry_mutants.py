"""Which interpreter command lines are vLLM serves, and how their arguments read: a script that is not vLLM's console
script is none, whatever its arguments; the OpenAI API server module takes its model from --model only, as vLLM's own
parser does for that form; an option vLLM does not know takes at most one value; a double dash ends the options, and
--config is refused in any spelling."""

from __future__ import annotations

import pytest

from kvbake.errors import IntegrityError
from kvbake.serve.core.vllm_argv import parse_serve_process, serve_entry
from message_words import says


def test_an_interpreter_running_another_script_with_serve_is_no_vllm_serve():
    assert serve_entry(("python3", "/app/run.py", "serve", "/models/m")) is None
    assert serve_entry(("python3", "/usr/local/bin/vllm", "serve", "/models/m")) is not None


def test_the_api_server_module_takes_its_model_from_the_model_option():
    served = parse_serve_process(("python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m", "--port", "8000"))
    assert served is not None and served.args.model == "/models/m"


def test_the_api_server_module_refuses_a_positional_model_it_would_ignore():
    with pytest.raises(IntegrityError) as refused:
        parse_serve_process(("python3", "-m", "vllm.entrypoints.openai.api_server", "/models/m"))
    assert says(refused.value.message, "ignores the positional argument '/models/m'")


def test_an_option_vllm_does_not_know_takes_at_most_one_value():
    with pytest.raises(IntegrityError) as refused:
        parse_serve_process(("vllm", "serve", "/models/m", "--not-a-vllm-option", "a", "b"))
    assert says(refused.value.message, "unexpected argument 'b'")
    served = parse_serve_process(("vllm", "serve", "/models/m", "--not-a-vllm-option", "a"))
    assert served is not None and served.args.model == "/models/m"


def test_arguments_after_a_double_dash_are_positional_beside_those_before_it():
    served = parse_serve_process(("vllm", "serve", "/models/m", "--max-model-len", "4096", "--"))
    assert served is not None and served.args.model == "/models/m"
    with pytest.raises(IntegrityError) as refused:
        parse_serve_process(("vllm", "serve", "/models/m", "--", "/models/other"))
    assert says(refused.value.message, "unexpected argument '/models/other'")


def test_a_dotted_key_of_config_is_refused_like_config_itself():
    with pytest.raises(IntegrityError) as refused:
        parse_serve_process(("vllm", "serve", "/models/m", "--config.section", "x"))
    assert says(refused.value.message, "--config.section reads further arguments from a file")
