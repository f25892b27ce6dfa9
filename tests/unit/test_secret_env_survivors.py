"""A container's variable list split at the first equals sign, a secret found by its name alone, and a secret option's
variable named once whether its value is joined by `=` or has none after it."""

from __future__ import annotations

from kvbake.secret_env import WITHHELD, split_env_list, withhold_args


def test_a_secret_variable_whose_value_holds_an_equals_sign_is_named_by_what_precedes_the_first():
    assert split_env_list(["HF_TOKEN=a=b", "PLAIN=x=y"]) == (["PLAIN=x=y"], ("HF_TOKEN",))


def test_a_variable_is_withheld_by_its_name_even_when_its_value_looks_harmless():
    assert split_env_list(["VLLM_API_KEY=short", "A=1"]) == (["A=1"], ("VLLM_API_KEY",))


def test_a_secret_option_joined_by_an_equals_sign_names_its_variable():
    out, names = withhold_args(["vllm", "serve", "--api-key=s3cret"])
    assert out == ["vllm", "serve", "--api-key=" + WITHHELD.format(name="VLLM_API_KEY")]
    assert names == ("VLLM_API_KEY",)


def test_a_secret_option_with_nothing_after_it_is_left_as_it_is():
    assert withhold_args(["vllm", "serve", "--api-key"]) == (["vllm", "serve", "--api-key"], ())
