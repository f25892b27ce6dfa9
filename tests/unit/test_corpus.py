"""Tests of corpus loading, its errors, and the token estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.operate.core.corpus import (
    Corpus,
    Document,
    chars_for_tokens,
    corpus_text,
    estimate_tokens,
    estimated_token_pieces,
    load_corpus,
    parse_records,
)
from kvbake.errors import CorpusError
from tests.doubles import FILINGS, OPINIONS, write_tiny_corpus


def test_load_corpus_reads_both_files_in_order(tmp_path: Path) -> None:
    corpus = load_corpus(write_tiny_corpus(tmp_path))
    assert [doc.text for doc in corpus.documents] == [*OPINIONS, *FILINGS]
    assert [Path(source).name for source in corpus.sources] == ["opinions_cl.jsonl", "filings_recap.jsonl"]
    assert corpus.documents[0].line == 1
    assert corpus.total_chars == sum(map(len, OPINIONS + FILINGS))


def test_blank_lines_are_skipped_and_line_numbers_kept() -> None:
    documents = parse_records("opinions_cl.jsonl", ['{"text": "a"}', "", "  ", '{"text": "b"}'])
    assert [(doc.line, doc.text) for doc in documents] == [(1, "a"), (4, "b")]


def test_missing_folder_is_a_corpus_error(tmp_path: Path) -> None:
    with pytest.raises(CorpusError) as caught:
        load_corpus(tmp_path / "absent")
    assert caught.value.exit_code == 16
    assert str(tmp_path / "absent") in caught.value.message and "does not exist" in caught.value.message
    assert "opinions_cl.jsonl" in caught.value.fix and "filings_recap.jsonl" in caught.value.fix


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    write_tiny_corpus(tmp_path)
    (tmp_path / "filings_recap.jsonl").unlink()
    with pytest.raises(CorpusError) as caught:
        load_corpus(tmp_path)
    assert caught.value.exit_code == 16
    assert str(tmp_path / "filings_recap.jsonl") in caught.value.message and "missing" in caught.value.message
    assert "corpus folder" in caught.value.fix


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("{not json", "not valid JSON"),
        ('["text"]', "must be a JSON object"),
        ('{"body": "x"}', "'text' is missing"),
        ('{"text": ""}', "'text' is missing, empty"),
        ('{"text": "   "}', "'text' is missing, empty"),
        ('{"text": 7}', "not a string"),
    ],
)
def test_malformed_record_names_file_and_line(tmp_path: Path, line: str, why: str) -> None:
    write_tiny_corpus(tmp_path)
    path = tmp_path / "opinions_cl.jsonl"
    path.write_text('{"text": "fine"}\n{"text": "fine"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(CorpusError) as caught:
        load_corpus(tmp_path)
    assert f"{path} line 3" in caught.value.message
    assert why in caught.value.message
    assert "'text'" in (caught.value.fix or "")


def test_file_without_records_is_an_error(tmp_path: Path) -> None:
    write_tiny_corpus(tmp_path)
    (tmp_path / "filings_recap.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(CorpusError) as caught:
        load_corpus(tmp_path)
    assert caught.value.exit_code == 16
    assert str(tmp_path / "filings_recap.jsonl") in caught.value.message and "no records" in caught.value.message
    assert "JSON object per line" in caught.value.fix


def test_non_utf8_file_is_an_error(tmp_path: Path) -> None:
    write_tiny_corpus(tmp_path)
    (tmp_path / "opinions_cl.jsonl").write_bytes(b'{"text": "\xff\xfe"}\n')
    with pytest.raises(CorpusError) as caught:
        load_corpus(tmp_path)
    assert caught.value.exit_code == 16
    assert all(field in caught.value.message for field in (str(tmp_path / "opinions_cl.jsonl"), "UTF-8", "byte 0xff"))


@pytest.mark.parametrize(("chars", "tokens"), [(0, 0), (1, 1), (4, 1), (5, 2), (8, 2), (4000, 1000), (4001, 1001)])
def test_estimate_is_one_token_per_started_four_characters(chars: int, tokens: int) -> None:
    assert estimate_tokens("x" * chars) == tokens
    assert len(estimated_token_pieces("y" * chars)) == tokens


def test_pieces_rebuild_the_text_and_chars_for_tokens_inverts_the_estimate() -> None:
    text = "The court held that the claim was timely."
    assert "".join(estimated_token_pieces(text)) == text
    assert estimate_tokens("z" * chars_for_tokens(321)) == 321


def test_corpus_text_has_exact_length_and_cycles_records() -> None:
    corpus = Corpus((Document("a", 1, "alpha"), Document("b", 1, "beta")))
    assert corpus_text(corpus, 0) == ""
    assert corpus_text(corpus, 20) == "alpha\n\nbeta\n\nalpha\n\n"
    assert corpus_text(corpus, 9, start=1) == "beta\n\nalp"
    assert len(corpus_text(corpus, 12345)) == 12345


def test_corpus_text_refuses_negative_lengths_and_empty_corpora() -> None:
    with pytest.raises(CorpusError) as negative:
        corpus_text(Corpus((Document("a", 1, "alpha"),)), -1)
    assert negative.value.exit_code == 16
    assert "-1 characters" in negative.value.message and "zero or more" in negative.value.fix
    with pytest.raises(CorpusError) as empty:
        corpus_text(Corpus(()), 10)
    assert empty.value.exit_code == 16
    assert "no records" in empty.value.message and "opinions_cl.jsonl" in empty.value.fix
