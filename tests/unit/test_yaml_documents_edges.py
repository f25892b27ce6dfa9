"""yaml_documents edges: a path's first key keeps its letters, a schema without properties names the key, a reader error its first line."""

from __future__ import annotations

import jsonschema
import pytest

from kvbake.errors import ManifestError
from kvbake.yaml_documents import describe_schema_error, field_name, json_path, parse_yaml
from tests.unit.message_words import says


def test_a_first_key_starting_with_x_keeps_its_letters() -> None:
    assert field_name(("Xmodel", 0)) == "Xmodel[0]"
    assert json_path(["Xmodel", 0]) == "Xmodel[0]"


def test_an_object_schema_without_properties_names_every_key_as_unknown() -> None:
    schema = {"type": "object", "additionalProperties": False}
    (error,) = jsonschema.Draft202012Validator(schema).iter_errors({"extra": 1})
    assert describe_schema_error(error) == "(top level): unknown key 'extra'"


def test_bytes_that_are_not_utf8_are_refused_with_the_reader_s_first_line() -> None:
    with pytest.raises(ManifestError) as caught:
        parse_yaml(b"name: caf\xe9\n", "m.yaml")
    assert says(caught.value.message, "m.yaml: malformed YAML: unacceptable character #x00e9")
    assert says(caught.value.fix, "fix the YAML syntax")
