"""A corpus file that is not UTF-8 is refused with the format's fix, naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.errors import CorpusError
from kvbake.operate.core.corpus import load_corpus
from tests.doubles import write_tiny_corpus


def test_a_file_that_is_not_utf8_names_the_file_and_says_how_records_are_written(tmp_path: Path) -> None:
    folder = write_tiny_corpus(tmp_path / "corpus")
    (folder / "filings_recap.jsonl").write_bytes(b'{"text": "caf\xe9"}\n')
    with pytest.raises(CorpusError) as caught:
        load_corpus(folder)
    assert "filings_recap.jsonl cannot be read as UTF-8" in caught.value.message
    assert "one JSON object per line" in (caught.value.fix or "")
