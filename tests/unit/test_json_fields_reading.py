"""json_fields called directly: the words for JSON types, names cut short, and every field check with the path it names."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from kvbake.command_output import emit
from kvbake.digests import canonical_json, sha256_digest, sha256_hex, tree_sha256
from kvbake.errors import KvbakeError, LockError
from kvbake.json_fields import Fields, first_non_json, kind_of, parse_document, read_document, shown
from tests.unit.message_words import says


@pytest.mark.parametrize(("value", "word"), [(None, "null"), (True, "a boolean"), (3, "a number"), (1.5, "a number"),
                                              ("x", "a string"), ([], "a list"), ({}, "an object"), ({1}, "set")])
def test_each_json_type_has_its_word(value, word: str) -> None:
    assert kind_of(value) == word


def test_a_name_is_quoted_and_cut_after_forty_characters() -> None:
    assert shown("a" * 40) == repr("a" * 40)
    assert shown("a" * 41) == repr("a" * 40 + "…")


def malformed(call, *args) -> str:
    with pytest.raises(LockError) as caught:
        call(*args)
    assert caught.value.exit_code == 4 and says(caught.value.fix, "restore it from version control")
    return caught.value.message


def test_the_object_itself_is_checked_and_named_at_the_top_level() -> None:
    assert says(malformed(Fields, "x.json", [], "", ("a",)), "x.json is malformed: the top level must be an object, not a list")
    assert says(malformed(Fields, "x.json", {}, "base", ("a", "b")), "x.json is malformed: base lacks the key 'a'")
    assert says(malformed(Fields, "x.json", {"a": 1, "z": 2, "y": 3}, "", ("a",)), "the top level has the unknown key 'y'")


def fields(**value) -> Fields:
    return Fields("x.json", value, "base", tuple(value))


def test_text_fields() -> None:
    assert fields(a="t").text("a") == "t" and fields(a=None).text("a", optional=True) is None
    assert says(malformed(fields(a=None).text, "a"), "base.a must be a string, not null")
    assert says(malformed(fields(a=3).text, "a", True), "base.a must be a string or null, not a number")
    assert says(malformed(fields(a="\ud800").text, "a"), "base.a is not valid Unicode text")


def test_number_fields() -> None:
    assert fields(a=0).number("a") == 0 and fields(a=4095).number("a", 4095) == 4095
    assert says(malformed(fields(a=4096).number, "a", 4095), "base.a must be a whole number ≥ 0 and ≤ 4095, not a number '4096'")
    assert says(malformed(fields(a=-1).number, "a"), "base.a must be a whole number ≥ 0, not a number '-1'")
    assert says(malformed(fields(a=True).number, "a"), "base.a must be a whole number ≥ 0, not a boolean 'True'")
    assert says(malformed(fields(a=1.0).number, "a"), "base.a must be a whole number ≥ 0, not a number '1.0'")


@pytest.mark.parametrize("path", ["", "/etc/x", "a/../b", "a\\b", "a\0b"])
def test_a_relative_path_field_refuses_what_could_leave_the_folder(path: str) -> None:
    assert says(malformed(fields(a=path).relative, "a"), "base.a must be a relative path without '..'")


def test_lists_and_nested_objects() -> None:
    assert fields(a=["x", "y"]).texts("a") == ("x", "y") and fields(a=("p/q",)).texts("a", relative=True) == ("p/q",)
    assert says(malformed(fields(a=["x", "/abs"]).texts, "a", True), "base.a[1] must be a relative path")
    assert says(malformed(fields(a={}).items, "a"), "base.a must be a list, not an object")
    assert fields(a={"k": 1}).child("a", ("k",)).number("k") == 1
    assert says(malformed(fields(a={}).child, "a", ("k",)), "base.a lacks the key 'k'")
    assert Fields("x.json", {"k": 1}, "", ("k",)).path_of("k") == "k"


def test_a_plain_object_holds_only_what_json_writes_back() -> None:
    assert fields(a={"k": [1, 2.5, None, True, "s"]}).plain_object("a") == {"k": [1, 2.5, None, True, "s"]}
    assert says(malformed(fields(a=[]).plain_object, "a"), "base.a must be an object, not a list")
    assert says(malformed(fields(a={"k": math.inf}).plain_object, "a"), "base.a holds a number that is not finite")
    assert first_non_json({1: "x"}) == "holds a key that is not valid text"
    assert first_non_json({"\ud800": "x"}) == "holds a key that is not valid text"
    assert first_non_json(["ok", ("\udfff",)]) == "holds a string that is not valid Unicode text"
    assert first_non_json({"k": [{"deep": {1, 2}}]}) == "holds set, which JSON cannot carry"
    assert first_non_json({"k": [math.nan]}) == "holds a number that is not finite" and first_non_json({"k": 1.0}) is None


@pytest.mark.parametrize(("data", "problem"), [
    (b" \n", "x.json is empty"),
    (b'{"a": "\xff"}', "x.json is malformed: not UTF-8 text (byte 7)"),
    (b"[" * 100_000, "x.json is malformed: nested too deeply"),
    (b'{"a": 1, "a": 2}', "x.json is malformed: not JSON (the key 'a' appears twice in one object"),
    (b'{"a": Infinity}', "x.json is malformed: not JSON (Infinity is not a JSON number"),
    (b"[1]", "x.json is malformed: the top level must be an object, not a list"),
])
def test_a_document_that_is_not_one_json_object_is_refused(data: bytes, problem: str) -> None:
    assert says(malformed(parse_document, "x.json", data), problem)


def test_a_document_is_read_from_its_file(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_bytes(b'{"a": [1]}')
    assert read_document(tmp_path / "x.json") == {"a": [1]}
    with pytest.raises(LockError) as caught:
        read_document(tmp_path)
    assert says(caught.value.message, f"{tmp_path.name} cannot be read (Is a directory)")
    assert says(caught.value.fix, "make it a readable file")


def test_hashes_and_canonical_json_are_the_stable_identities() -> None:
    assert sha256_hex(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert sha256_digest(b"") == "sha256:" + sha256_hex(b"")
    assert canonical_json({"b": [1, {"d": 2, "c": "é"}], "a": None}) == '{"a":null,"b":[1,{"c":"é","d":2}]}'.encode("utf-8")
    expected = sha256_hex(b"h1  a\nh2  b\n")
    assert tree_sha256([("b", "h2"), ("a", "h1")]) == tree_sha256([("a", "h1"), ("b", "h2")]) == expected


def test_an_error_is_one_line_with_its_fix_and_without_an_empty_one() -> None:
    err = KvbakeError("the  lock\n drifts", "run\tlock  again")
    assert err.one_line() == str(err) == "the lock drifts; fix: run lock again"
    assert KvbakeError("no fix", "").one_line() == "no fix" and KvbakeError("no fix").fix is None


def test_a_result_prints_as_json_or_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    emit(argparse.Namespace(json=True), {"b": 1, "a": [2]}, "text")
    assert capsys.readouterr().out == '{\n "a": [\n  2\n ],\n "b": 1\n}\n'
    emit(argparse.Namespace(json=False), {"b": 1}, "text")
    assert capsys.readouterr().out == "text\n"
