"""The public text corpus the validation prompts are built from, and the token estimate used for them."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kvbake.errors import CorpusError

CORPUS_FILES: tuple[str, ...] = ("opinions_cl.jsonl", "filings_recap.jsonl")
TEXT_FIELD = "text"
CHARS_PER_TOKEN = 4
DOCUMENT_SEPARATOR = "\n\n"

_FORMAT_FIX = f"write one JSON object per line, each with a non-empty string field {TEXT_FIELD!r}"
_FOLDER_FIX = f"use a corpus folder that holds {' and '.join(CORPUS_FILES)}"


@dataclass(frozen=True)
class Document:
    """One corpus record: the file it came from, its 1-based line and its text."""

    source: str
    line: int
    text: str


@dataclass(frozen=True)
class Corpus:
    """All records of a corpus folder, in file order then line order."""

    documents: tuple[Document, ...]

    @property
    def total_chars(self) -> int:
        """The number of characters over every record."""
        return sum(len(doc.text) for doc in self.documents)

    @property
    def sources(self) -> tuple[str, ...]:
        """The files that contributed records, in order and without repeats."""
        return tuple(dict.fromkeys(doc.source for doc in self.documents))


def estimate_tokens(text: str) -> int:
    """Estimate a token count as one token per started group of CHARS_PER_TOKEN characters."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimated_token_pieces(text: str) -> tuple[str, ...]:
    """Split text into the pieces the estimate counts: consecutive CHARS_PER_TOKEN-character slices."""
    return tuple(text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN))


def chars_for_tokens(tokens: int) -> int:
    """The number of characters that the estimate counts as exactly `tokens` tokens."""
    return tokens * CHARS_PER_TOKEN


def parse_record(source: str, line_number: int, line: str) -> Document:
    """Parse one JSON Lines record into a Document, or raise CorpusError naming the file and line."""
    where = f"{source} line {line_number}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise CorpusError(f"{where}: not valid JSON ({err.msg})", fix=_FORMAT_FIX) from err
    if not isinstance(record, dict):
        raise CorpusError(f"{where}: a record must be a JSON object", fix=_FORMAT_FIX)
    text = record.get(TEXT_FIELD)
    if not isinstance(text, str) or not text.strip():
        raise CorpusError(f"{where}: field {TEXT_FIELD!r} is missing, empty or not a string", fix=_FORMAT_FIX)
    return Document(source=source, line=line_number, text=text)


def parse_records(source: str, lines: Iterable[str]) -> tuple[Document, ...]:
    """Parse every non-blank line of one corpus file; a file without records is an error."""
    documents = tuple(
        parse_record(source, number, line) for number, line in enumerate(lines, start=1) if line.strip()
    )
    if not documents:
        raise CorpusError(f"{source}: holds no records", fix=_FORMAT_FIX)
    return documents


def load_corpus(data_dir: Path) -> Corpus:
    """Read both corpus files from a folder; anything missing or malformed raises CorpusError."""
    if not data_dir.is_dir():
        raise CorpusError(f"corpus folder {data_dir} does not exist", fix=_FOLDER_FIX)
    documents: list[Document] = []
    for name in CORPUS_FILES:
        path = data_dir / name
        if not path.is_file():
            raise CorpusError(f"corpus file {path} is missing", fix=_FOLDER_FIX)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise CorpusError(f"corpus file {path} cannot be read as UTF-8: {err}", fix=_FORMAT_FIX) from err
        documents.extend(parse_records(str(path), text.splitlines()))
    return Corpus(documents=tuple(documents))


def corpus_text(corpus: Corpus, n_chars: int, start: int = 0) -> str:
    """Exactly n_chars characters of corpus text, from record `start` on, cycling through the records."""
    if n_chars < 0:
        raise CorpusError(f"cannot take {n_chars} characters of corpus text", fix="ask for zero or more characters")
    if not corpus.documents:
        raise CorpusError("the corpus holds no records", fix=_FOLDER_FIX)
    parts: list[str] = []
    length = 0
    count = len(corpus.documents)
    index = start % count
    while length < n_chars:
        piece = corpus.documents[index].text + DOCUMENT_SEPARATOR
        parts.append(piece)
        length += len(piece)
        index = (index + 1) % count
    return "".join(parts)[:n_chars]
