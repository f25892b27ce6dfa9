"""Needle recall and the cross-request corruption set: unique codes, prompt construction and pure scorers."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from kvbake.errors import KvbakeError
from kvbake.operate.core.corpus import Corpus, chars_for_tokens, corpus_text, estimate_tokens

CORRUPTION_SET_SIZE = 16
DEFAULT_DEPTH_FRACTIONS: tuple[float, ...] = (0.5, 0.9)
NEEDLE_PATTERN = re.compile(r"NEEDLE-[0-9A-F]{4}-[0-9A-F]{4}")
NEEDLE_QUESTION = (
    "\n\nQuestion: The text above contains access codes of the form NEEDLE-XXXX-XXXX. "
    "List every access code exactly as written, separated by commas, and nothing else.\nAnswer:"
)


def needle_sentence(code: str) -> str:
    """The sentence that carries one code inside the filler text."""
    return f"\nAccess code: {code}.\n"


def make_needle_codes(seed: str | int, count: int) -> tuple[str, ...]:
    """Derive `count` distinct codes like NEEDLE-7F3A-19C2 from a seed; the same seed gives the same codes."""
    if count < 0:
        raise KvbakeError(f"cannot make {count} needle codes", fix="ask for zero or more codes")
    codes: dict[str, None] = {}
    counter = 0
    while len(codes) < count:
        digest = hashlib.sha256(f"{seed}:{counter}".encode()).hexdigest().upper()
        codes.setdefault(f"NEEDLE-{digest[:4]}-{digest[4:8]}")
        counter += 1
    return tuple(codes)


def find_codes(text: str) -> tuple[str, ...]:
    """Every needle code in a text, in order of first appearance, without repeats."""
    return tuple(dict.fromkeys(NEEDLE_PATTERN.findall(text)))


def default_depths(ctx_tokens: int, count: int = len(DEFAULT_DEPTH_FRACTIONS)) -> tuple[int, ...]:
    """Token depths for `count` needles, spread over DEFAULT_DEPTH_FRACTIONS (two) or evenly (otherwise)."""
    if count == len(DEFAULT_DEPTH_FRACTIONS):
        fractions = DEFAULT_DEPTH_FRACTIONS
    else:
        fractions = tuple((i + 1) / (count + 1) for i in range(count))
    return tuple(int(ctx_tokens * fraction) for fraction in fractions)


@dataclass(frozen=True)
class NeedlePrompt:
    """A long prompt with needle codes placed at token depths (estimated), ending with the question."""

    text: str
    codes: tuple[str, ...]
    depths: tuple[int, ...]

    @property
    def estimated_tokens(self) -> int:
        """The prompt length by the corpus token estimate."""
        return estimate_tokens(self.text)


def _check_layout(ctx_tokens: int, placements: Sequence[tuple[int, str]]) -> None:
    end_of_body = chars_for_tokens(ctx_tokens) - len(NEEDLE_QUESTION)
    position = 0
    for depth, code in placements:
        start = chars_for_tokens(depth)
        if depth < 0 or start < position:
            raise KvbakeError(
                f"needle {code} at depth {depth} overlaps the previous needle or lies before the start",
                fix="pass distinct, non-negative depths at least a few tokens apart",
            )
        position = start + len(needle_sentence(code))
    if position > end_of_body:
        raise KvbakeError(
            f"needles up to depth {placements[-1][0] if placements else 0} do not fit a {ctx_tokens}-token prompt "
            "before its question",
            fix="pass a larger context or smaller depths",
        )


def build_needle_prompt(
    corpus: Corpus, ctx_tokens: int, depths: Sequence[int], codes: Sequence[str], start: int = 0
) -> NeedlePrompt:
    """Fill ctx_tokens estimated tokens with corpus text; each code's sentence starts exactly at its token depth."""
    if len(depths) != len(codes):
        raise KvbakeError(f"{len(codes)} codes for {len(depths)} depths", fix="pass one depth per needle code")
    placements = sorted(zip(depths, codes))
    _check_layout(ctx_tokens, placements)
    sentences_chars = sum(len(needle_sentence(code)) for code in codes)
    filler = corpus_text(corpus, chars_for_tokens(ctx_tokens) - len(NEEDLE_QUESTION) - sentences_chars, start)
    parts: list[str] = []
    taken = 0
    inserted = 0
    for depth, code in placements:
        cut = chars_for_tokens(depth) - inserted
        parts += [filler[taken:cut], needle_sentence(code)]
        inserted += len(needle_sentence(code))
        taken = cut
    parts.append(filler[taken:])
    parts.append(NEEDLE_QUESTION)
    ordered = tuple(code for _, code in placements)
    return NeedlePrompt(text="".join(parts), codes=ordered, depths=tuple(depth for depth, _ in placements))


def build_corruption_set(
    corpus: Corpus, ctx_tokens: int, seed: str | int, size: int = CORRUPTION_SET_SIZE, needles: int = 2
) -> tuple[NeedlePrompt, ...]:
    """`size` needle prompts, each with its own codes and its own starting record, for concurrent requests."""
    return build_sized_set(corpus, [ctx_tokens] * size, seed, needles)


def build_sized_set(corpus: Corpus, sizes: Sequence[int], seed: str | int, needles: int = 2) -> tuple[NeedlePrompt, ...]:
    """One needle prompt per size (estimated tokens), each with its own codes and its own starting record."""
    codes = make_needle_codes(seed, len(sizes) * needles)
    return tuple(
        build_needle_prompt(corpus, size, default_depths(size, needles), codes[i * needles : (i + 1) * needles], start=i)
        for i, size in enumerate(sizes)
    )


@dataclass(frozen=True)
class RequestVerdict:
    """One request's result: its own codes that are missing, other requests' codes that appeared, unknown codes."""

    index: int
    missing: tuple[str, ...]
    foreign: tuple[str, ...]
    unknown: tuple[str, ...]

    @property
    def passed(self) -> bool:
        """A request passes when all its own codes are present and no foreign code appears."""
        return not self.missing and not self.foreign


@dataclass(frozen=True)
class CorruptionVerdict:
    """Per-request verdicts of a corruption set."""

    requests: tuple[RequestVerdict, ...]

    @property
    def passed_count(self) -> int:
        """How many requests passed."""
        return sum(1 for verdict in self.requests if verdict.passed)

    @property
    def passed(self) -> bool:
        """True when every request passed."""
        return self.passed_count == len(self.requests)


def score_corruption(requests_and_answers: Sequence[tuple[Sequence[str], str]]) -> CorruptionVerdict:
    """Score (own codes, answer) pairs: a request fails on a missing own code or any code of another request."""
    owner: dict[str, int] = {}
    for index, (codes, _) in enumerate(requests_and_answers):
        for code in codes:
            if owner.setdefault(code, index) != index:
                raise KvbakeError(f"code {code} is given to two requests", fix="give every request its own codes")
    verdicts = []
    for index, (codes, answer) in enumerate(requests_and_answers):
        seen = find_codes(answer)
        verdicts.append(
            RequestVerdict(
                index=index,
                missing=tuple(code for code in codes if code not in seen),
                foreign=tuple(code for code in seen if owner.get(code, index) != index),
                unknown=tuple(code for code in seen if code not in owner),
            )
        )
    return CorruptionVerdict(requests=tuple(verdicts))


def score_recall(codes: Sequence[str], answer: str) -> RequestVerdict:
    """Score a single needle request: which of its codes the answer lacks."""
    return score_corruption([(codes, answer)]).requests[0]
