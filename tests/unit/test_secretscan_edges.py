"""secretscan at its edges: scheme case, several Basic values, where a finding is placed, and what withholding keeps."""

from __future__ import annotations

import base64
import dataclasses
from collections import namedtuple

import pytest

from kvbake.errors import IntegrityError
from kvbake.secretscan import (credential_kind, find_credentials, refuse_credentials, refuse_in_option, userinfo_kind,
                               withheld, withhold_credentials)
from tests.unit.message_words import says

GHP = "ghp_" + "A1b2C3d4E5" * 3 + "f6G7h8"
BASIC = "Basic " + base64.b64encode(b"user:password").decode()


@pytest.mark.parametrize("url", ["HTTPS://tok3n@example.invalid/x.git", "Git://tok3n@example.invalid/x", "ftp://tok3n@h/x",
                                 "ftps://tok3n@h/x", "http://tok3n@h/x"])
def test_a_token_as_username_is_found_whatever_the_case_of_the_scheme(url: str) -> None:
    assert userinfo_kind(url) == "URL userinfo"
    assert credential_kind(url) == "URL userinfo"


@pytest.mark.parametrize("url", ["s3://bucket@region/x", "https://@example.invalid/x", "ssh://ops@node-a"])
def test_a_username_alone_outside_the_token_schemes_or_an_empty_one_is_clean(url: str) -> None:
    assert userinfo_kind(url) is None


def test_a_password_in_any_scheme_is_userinfo() -> None:
    assert userinfo_kind("s3://key:secret@region/x") == "URL userinfo"
    assert userinfo_kind("see ssh://ops@node-a then https://tok3n@h/x") == "URL userinfo"


def test_a_basic_value_counts_only_when_it_decodes_to_a_user_and_password() -> None:
    assert credential_kind("Basic " + base64.b64encode(b"userpassword").decode()) is None
    assert credential_kind(BASIC) == "a Basic authorization value"


def test_a_basic_value_after_one_that_does_not_decode_is_still_found() -> None:
    assert credential_kind(f"Basic abcdefghi then {BASIC}") == "a Basic authorization value"
    assert credential_kind("Basic " + base64.b64encode(b"userpassword").decode() + " and " + BASIC) == "a Basic authorization value"


def test_a_url_with_userinfo_is_named_as_such_before_any_token_in_it() -> None:
    assert credential_kind(f"https://x:{GHP}@example.invalid/r") == "URL userinfo"


def test_a_key_at_the_top_level_and_items_of_nested_lists_are_placed() -> None:
    assert find_credentials({"password=hunter22": 1}) == [("a key of (top level)", "a password or token query pair")]
    assert find_credentials({"m": [["ok", GHP]], "t": ("x", (BASIC,))}) == [("m[0][1]", "a GitHub token"),
                                                                           ("t[1][0]", "a Basic authorization value")]
    assert find_credentials({"n": 3, "none": None, "f": 1.5}) == []


def test_a_refusal_names_every_place_with_its_kind_and_tells_where_to_fix_it() -> None:
    with pytest.raises(IntegrityError) as caught:
        refuse_credentials({"a": "https://u:p@h/x", "b": [GHP]}, "the release record")
    err = caught.value
    assert err.exit_code == 7
    assert says(err.message, "the release record: a (URL userinfo), b[0] (a GitHub token) looks like a credential")
    assert says(err.fix, "remove it at its source") and GHP not in err.one_line()


def test_an_option_holding_a_credential_is_refused_naming_the_option_the_kind_and_the_target() -> None:
    fix = "give the reason without it"
    with pytest.raises(IntegrityError) as caught:
        refuse_in_option("--reason", f"rotated {GHP}", "the release record", fix)
    err = caught.value
    assert says(err.message, "--reason holds a GitHub token") and says(err.message, "the release record")
    assert err.fix is fix and GHP not in err.one_line()


@pytest.mark.parametrize("text", [None, "", "a plain reason"])
def test_an_option_without_a_credential_passes(text) -> None:
    assert refuse_in_option("--reason", text, "the release record", "fix") is None


@dataclasses.dataclass
class Holder:
    name: str
    items: list
    cached: str = dataclasses.field(default="kept", init=False)


def test_withholding_keeps_the_container_types_and_what_is_not_text() -> None:
    Pair = namedtuple("Pair", "left right")
    value = {1: GHP, "list": [GHP, 2], "tuple": (GHP,), "pair": Pair(GHP, 3), "type": Holder, "n": None}
    result = withhold_credentials(value)
    gh = withheld("a GitHub token")
    assert result == {1: gh, "list": [gh, 2], "tuple": (gh,), "pair": Pair(gh, 3), "type": Holder, "n": None}
    assert type(result["list"]) is list and type(result["tuple"]) is tuple and type(result["pair"]) is Pair


def test_withholding_rebuilds_a_dataclass_from_its_init_fields() -> None:
    holder = Holder("x", [BASIC])
    holder.cached = "changed"
    result = withhold_credentials(holder)
    assert result.items == [withheld("a Basic authorization value")] and result.name == "x"
    assert result.cached == "kept" and holder.items == [BASIC]


def test_a_basic_value_is_decoded_strictly() -> None:
    # "YWI6Y2RlZmc=" is ab:cdefg; with one '=' too many it is not valid base64, which only a lenient decoder reads
    assert credential_kind("Basic YWI6Y2RlZmc=") == "a Basic authorization value"
    assert credential_kind("Basic YWI6Y2RlZmc==") is None


def test_a_key_that_is_not_text_is_kept_as_it_is() -> None:
    key = ("label", GHP)
    assert list(withhold_credentials({key: "v", 3: GHP})) == [key, 3]
