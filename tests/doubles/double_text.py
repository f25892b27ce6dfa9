"""The test double's own reading of text: its tokenizers, its needle-code rule and its block prefix cache.

Nothing here imports kvbake, so a test that passes against the double does not only confirm kvbake against itself.

Tokenizers (deterministic; ids are the CRC-32 of each piece, so equal pieces get equal ids):
- "estimate": consecutive 4-character slices, the rule kvbake documents for its own estimate;
- "words": an optional space then at most 4 letters, or an optional space then at most 3 digits, or a run of
  whitespace, or one other character; on English prose this gives about 20 % more tokens than the estimate;
- "long-words": an optional space, at most 10 letters (or 3 digits) and one trailing '.' or ','; a run of
  whitespace; one other character; about 15 % fewer tokens than the estimate.

Needle codes: the double scans the prompt for the literal "NEEDLE-" and accepts the 16 characters starting there
when they read NEEDLE-HHHH-HHHH with H an upper-case hexadecimal digit; codes are kept in order of first
appearance, without repeats. The question's placeholder NEEDLE-XXXX-XXXX is therefore not a code.
"""

from __future__ import annotations

import hashlib
import re
import threading
import zlib
from collections.abc import Callable

ESTIMATE_CHARS = 4
CODE_MARK = "NEEDLE-"
CODE_LENGTH = 16
HEX_DIGITS = frozenset("0123456789ABCDEF")
_WORDS = re.compile(r" ?[A-Za-z]{1,4}| ?[0-9]{1,3}|\s+|.", re.DOTALL)
_LONG_WORDS = re.compile(r" ?[A-Za-z]{1,10}[.,]?| ?[0-9]{1,3}[.,]?|\s+|.", re.DOTALL)


def estimate_pieces(text: str) -> list[str]:
    return [text[i : i + ESTIMATE_CHARS] for i in range(0, len(text), ESTIMATE_CHARS)]


TOKENIZERS: dict[str, Callable[[str], list[str]]] = {
    "estimate": estimate_pieces,
    "words": _WORDS.findall,
    "long-words": _LONG_WORDS.findall,
}


def token_pieces(text: str, tokenizer: str) -> list[str]:
    """Split a text into the pieces the named tokenizer counts; they join back to the text."""
    return TOKENIZERS[tokenizer](text)


def token_ids(text: str, tokenizer: str) -> tuple[int, ...]:
    """The ids of a text's pieces under the named tokenizer."""
    return tuple(zlib.crc32(piece.encode()) for piece in token_pieces(text, tokenizer))


def _is_code(candidate: str) -> bool:
    if len(candidate) != CODE_LENGTH or candidate[11] != "-":
        return False
    return all(char in HEX_DIGITS for char in candidate[7:11] + candidate[12:16])


def find_needle_codes(prompt: str) -> tuple[str, ...]:
    """Every NEEDLE-HHHH-HHHH in the prompt, by the rule of this module's docstring."""
    found: dict[str, None] = {}
    position = prompt.find(CODE_MARK)
    while position >= 0:
        candidate = prompt[position : position + CODE_LENGTH]
        if _is_code(candidate):
            found.setdefault(candidate)
        position = prompt.find(CODE_MARK, position + 1)
    return tuple(found)


class PrefixCacheModel:
    """A chain-hashed cache of full token blocks keyed by salt, safe to use from many threads."""

    def __init__(self, block: int) -> None:
        self.block = block
        self._lock = threading.Lock()
        self._blocks: set[str] = set()

    def _block_hashes(self, salt: str, ids: tuple[int, ...], count: int) -> list[str]:
        hashes, parent = [], salt
        for index in range(count):
            chunk = ids[index * self.block : (index + 1) * self.block]
            parent = hashlib.sha256(f"{parent}|{','.join(map(str, chunk))}".encode()).hexdigest()
            hashes.append(parent)
        return hashes

    def serve(self, salt: str, ids: tuple[int, ...]) -> int:
        """Return the cached tokens for a prompt, then cache its full blocks; the last token is never a hit."""
        usable = self._block_hashes(salt, ids, (len(ids) - 1) // self.block)
        with self._lock:
            hits = next((i for i, key in enumerate(usable) if key not in self._blocks), len(usable))
            self._blocks.update(self._block_hashes(salt, ids, len(ids) // self.block))
        return hits * self.block

    def reset(self) -> None:
        """Forget every cached block."""
        with self._lock:
            self._blocks.clear()
