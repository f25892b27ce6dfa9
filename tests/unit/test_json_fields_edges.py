"""json_fields edges: plain text lists take any text, and an unreadable file without a reason names its error class."""

from __future__ import annotations

import pytest

from kvbake.errors import LockError
from kvbake.json_fields import Fields, read_document
from message_words import says


def fields(**value) -> Fields:
    return Fields("x.json", value, "base", tuple(value))


def test_a_plain_text_list_takes_texts_a_relative_path_list_refuses() -> None:
    texts = ["/etc/x", "a/../b", "a\\b", ""]
    assert fields(a=texts).texts("a") == tuple(texts)
    with pytest.raises(LockError):
        fields(a=texts).texts("a", relative=True)


class UnreadableWithoutReason:
    """A lock file stand-in whose read fails with an OSError that carries no strerror."""

    name = "x.json"

    def read_bytes(self) -> bytes:
        raise TimeoutError()


def test_an_unreadable_file_without_a_reason_is_named_by_its_error_class() -> None:
    with pytest.raises(LockError) as caught:
        read_document(UnreadableWithoutReason())
    assert says(caught.value.message, "x.json cannot be read (TimeoutError)")
    assert not says(caught.value.message, "NoneType")
