"""Corpus files are read as UTF-8 whatever the process locale says."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.operate.core.corpus import load_corpus
from tests.doubles import write_tiny_corpus


@pytest.mark.usefixtures("ascii_locale")
def test_a_utf8_record_loads_under_an_ascii_locale(tmp_path: Path) -> None:
    folder = write_tiny_corpus(tmp_path / "corpus")
    (folder / "filings_recap.jsonl").write_bytes('{"text": "Café filing under § 1983."}\n'.encode("utf-8"))
    corpus = load_corpus(folder)
    assert corpus.documents[-1].text == "Café filing under § 1983."
