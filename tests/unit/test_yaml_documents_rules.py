"""yaml_documents: paths as messages write them, the string rules, strict parsing and schema phrases, called directly."""

from __future__ import annotations

import jsonschema
import pytest

from kvbake.errors import ManifestError
from kvbake.yaml_documents import (KeyOf, check_strings, control_character, describe_schema_error, did_you_mean, document_strings,
                                   field_name, json_path, parse_yaml)
from tests.unit.message_words import says


def refusal(call, *args, **kwargs) -> ManifestError:
    with pytest.raises(ManifestError) as caught:
        call(*args, **kwargs)
    assert caught.value.exit_code == 3
    return caught.value


def test_field_names_are_dotted_with_indexes_and_escaped_control_characters() -> None:
    assert field_name(("chain", 0, "file")) == "chain[0].file"
    assert field_name(()) == "(top level)"
    assert field_name(("env", KeyOf)) == "a key of env"
    assert field_name((KeyOf,)) == "a key of (top level)"
    assert field_name(("a\x1bb", 2)) == "a\\x1bb[2]"
    assert json_path(["chain", 0, "file"]) == "chain[0].file" and json_path([]) == "(top level)"


def test_every_string_and_key_is_walked_with_its_path() -> None:
    found = list(document_strings({"a": ["x", {"b": "y"}], 3: "z", "n": 1}, (), "m.yaml"))
    assert found == [((KeyOf,), "a"), (("a", 0), "x"), (("a", 1, KeyOf), "b"), (("a", 1, "b"), "y"), ((3,), "z"),
                     ((KeyOf,), "n")]
    assert list(document_strings({(1, 2): "v"}, (), "m.yaml")) == [(("(1, 2)",), "v")]


def test_a_recursive_alias_and_a_deep_nesting_are_refused() -> None:
    loop: list = []
    loop.append(loop)
    err = refusal(list, document_strings({"a": loop}, (), "m.yaml"))
    assert says(err.message, "m.yaml: a[0] refers to itself through a YAML alias") and says(err.fix, "write the value out")
    deep: object = "leaf"
    for _ in range(34):
        deep = [deep]
    err = refusal(list, document_strings(deep, (), "m.yaml"))
    assert says(err.message, "is nested more than 32 levels deep") and says(err.fix, "flatten the document")
    shallow: object = "leaf"
    for _ in range(33):
        shallow = [shallow]
    assert len(list(document_strings(shallow, (), "m.yaml"))) == 1


def test_the_same_list_twice_is_no_recursion() -> None:
    shared = ["x"]
    assert len(list(document_strings({"a": shared, "b": shared}, (), "m.yaml"))) == 4


def test_control_characters_are_named_by_code_point_and_prose_may_hold_newlines_and_tabs() -> None:
    assert control_character("a\nb") == "U+000A" and control_character("a\x7f") == "U+007F"
    assert control_character("a\n\tb", prose=True) is None and control_character("a\rb", prose=True) == "U+000D"
    assert control_character("plain") is None


def test_a_credential_is_refused_with_the_fix_given() -> None:
    err = refusal(check_strings, {"donor": {"url": "https://user@example.invalid/x.git"}}, "m.yaml")
    assert says(err.message, "m.yaml: donor.url holds URL userinfo (user:token@), which would be copied in clear")
    assert says(err.fix, "remove it from the file; give the donor's credentials to git through a credential helper")
    err = refusal(check_strings, {"k": "ghp_" + "a1" * 20}, "d.yaml", any_userinfo=False, credential_fix="drop it")
    assert says(err.message, "d.yaml: k holds a GitHub token") and says(err.fix, "drop it")


def test_without_any_userinfo_a_user_alone_passes() -> None:
    assert check_strings({"host": "ssh://ops@node"}, "d.yaml", any_userinfo=False) is None


def test_every_control_character_is_listed_and_prose_fields_are_spared() -> None:
    err = refusal(check_strings, {"a": "x\n", "b": ["y\t"], "description": "two\nlines"}, "m.yaml")
    assert says(err.message, "m.yaml: a contains control character U+000A; b[0] contains control character U+0009")
    assert "description" not in err.message
    assert says(err.fix, "remove control characters (newlines, tabs, escapes) from those values")
    err = refusal(check_strings, {"description": "two\nlines"}, "m.yaml", prose_fields=())
    assert says(err.message, "description contains control character U+000A")


def test_strict_yaml_refuses_duplicate_and_unhashable_keys_naming_the_line() -> None:
    err = refusal(parse_yaml, b"a: 1\nb: 2\na: 3\n", "m.yaml")
    assert says(err.message, "m.yaml line 3: malformed YAML: duplicate key 'a'") and says(err.fix, "fix the YAML syntax")
    err = refusal(parse_yaml, b"x: 1\n? [a]\n: b\n", "m.yaml")
    assert says(err.message, "m.yaml line 2: malformed YAML: a list cannot be a mapping key")
    assert parse_yaml(b"a: 1\nb: {a: 2}\n", "m.yaml") == {"a": 1, "b": {"a": 2}}


def test_a_syntax_error_names_its_line_and_problem() -> None:
    err = refusal(parse_yaml, b"a: 1\nb: [unclosed\n", "m.yaml")
    assert says(err.message, "m.yaml line 3: malformed YAML")


def test_a_value_yaml_cannot_represent_asks_to_quote_it() -> None:
    err = refusal(parse_yaml, b"when: 2024-13-45\n", "m.yaml")
    assert says(err.message, "m.yaml: a YAML value cannot be read: month must be in 1..12") and says(err.fix, "quote the value")


def test_too_deep_yaml_is_refused() -> None:
    err = refusal(parse_yaml, b"[" * 5000 + b"]" * 5000, "m.yaml")
    assert says(err.message, "m.yaml: YAML nested too deeply to read") and says(err.fix, "flatten the document")


SCHEMA = {"type": "object", "properties": {"chain": {"type": "array"}, "name": {"type": "string"}}, "required": ["name"],
          "additionalProperties": False}


def schema_errors(document: object) -> list[str]:
    return [describe_schema_error(e) for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(document)]


def test_schema_errors_read_as_phrases() -> None:
    assert schema_errors({"name": "x", "chian": [], "zzz": 1}) == [
        "(top level): unknown key 'chian' (did you mean 'chain'?); (top level): unknown key 'zzz'"]
    assert schema_errors({}) == ["(top level): missing key 'name'"]
    assert schema_errors({"name": 3}) == ["name: 3 is not of type 'string'"]


def test_did_you_mean_needs_a_text_and_a_close_word() -> None:
    assert did_you_mean("nmae", ["name", "chain"]) == " (did you mean 'name'?)"
    assert did_you_mean(3, ["name"]) == "" and did_you_mean("zzz", ["name"]) == ""
