"""The engine's empty marker image: imported once from an empty archive under its reference, kept when present, a refusal named."""

from __future__ import annotations

import tarfile
from types import SimpleNamespace

from python_on_whales.exceptions import NoSuchImage

from message_words import says
from test_container_ops import refusal
from test_engine_client_calls import engine_with, raised

REFERENCE = "kvbake/empty:1"


def absent() -> NoSuchImage:
    return NoSuchImage(["docker", "image", "inspect"], 1, b"", f"Error: No such image: {REFERENCE}".encode())


def test_an_absent_empty_image_is_imported_from_an_archive_that_holds_no_file():
    seen = []

    def import_(archive):
        with tarfile.open(archive) as tar:
            seen.append(tar.getnames())
    engine = engine_with(inspect=absent(), import_=import_)
    engine.ensure_empty_image(REFERENCE)
    assert seen == [[]], "docker import got one readable archive, with no entry"
    inspected, imported = engine.client.image.calls
    assert inspected == ("inspect", (REFERENCE,), {})
    assert imported[0] == "import_" and imported[2] == {"tag": REFERENCE}


def test_an_empty_image_already_present_is_not_imported_again():
    engine = engine_with(inspect=SimpleNamespace(id="sha256:" + "e" * 64), import_=AssertionError("imported"))
    engine.ensure_empty_image(REFERENCE)
    assert [call[0] for call in engine.client.image.calls] == ["inspect"]


def test_a_refused_import_is_an_engine_error_naming_the_reference_and_the_reason():
    engine = engine_with(inspect=absent(), import_=refusal("no space left on device"))
    error = raised(lambda: engine.ensure_empty_image(REFERENCE))
    assert error.exit_code == 8 and says(error.message, f"import {REFERENCE}") and says(error.message, "no space left on device")
