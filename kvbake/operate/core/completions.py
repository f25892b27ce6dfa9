"""A completion as the validation checks see it: the greedy request sent, and the parts of the answer they read."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_TOKENS = 64


@dataclass(frozen=True)
class CompletionRequest:
    """One greedy completion request; cache_salt isolates its prefix cache when set; ignore_eos makes it sample
    exactly max_tokens tokens."""

    prompt: str
    max_tokens: int = DEFAULT_MAX_TOKENS
    cache_salt: str | None = None
    ignore_eos: bool = False


@dataclass(frozen=True)
class Completion:
    """The parts of a completion the validation checks read."""

    text: str
    prompt_tokens: int
    cached_tokens: int
