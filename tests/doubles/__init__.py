"""Test doubles for what kvbake talks to or reads: an OpenAI-compatible server and a tiny public-format corpus."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

OPINIONS = tuple(f"Opinion {i}. The court held that claim {i} was barred by limitation." for i in range(6))
FILINGS = tuple(f"Docket entry {i}. The motion to compel discovery was granted in part." for i in range(6))


def write_tiny_corpus(
    folder: Path, opinions: Sequence[str] = OPINIONS, filings: Sequence[str] = FILINGS
) -> Path:
    """Write opinions_cl.jsonl and filings_recap.jsonl (one {"text": ...} record a line) and return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, texts in (("opinions_cl.jsonl", opinions), ("filings_recap.jsonl", filings)):
        lines = (json.dumps({"text": text, "id": index}) for index, text in enumerate(texts))
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder
