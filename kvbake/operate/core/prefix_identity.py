"""Prefix-cache identity: expected cached-token counts, the output scorer and the cold/hit/fresh-salt verdict."""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from kvbake.errors import KvbakeError, ValidationStop
from kvbake.operate.core.corpus import Corpus, chars_for_tokens, corpus_text

DEFAULT_BLOCK = 384
FLOOR_TOLERANCE = 1e-12
SUMMARY_QUESTION = "\n\nQuestion: Summarise the text above in three sentences.\nAnswer:"
DIVERGENCE_MARKERS: tuple[str, ...] = ("\n\n--- another record ---\n\n", "\t--- another record ---\n\n")


def _require_positive(name: str, value: int) -> None:
    if value < 1:
        raise KvbakeError(f"{name} must be a positive token count, got {value}", fix=f"pass {name} >= 1")


def _require_non_negative(name: str, value: int) -> None:
    if value < 0:
        raise KvbakeError(f"{name} must be zero or more tokens, got {value}", fix=f"pass {name} >= 0")


def expected_cached_tokens(n: int, block: int = DEFAULT_BLOCK) -> int:
    """Cached tokens for a repeat of an n-token prompt: floor((n-1)/block)*block; the last token is always computed."""
    _require_positive("n", n)
    _require_positive("block", block)
    return (n - 1) // block * block


def partial_prefix_cached_tokens(m: int, n: int, block: int = DEFAULT_BLOCK) -> int:
    """Cached tokens when n tokens share m leading ones with a cached prompt: floor(min(m, n-1)/block)*block."""
    _require_non_negative("m", m)
    _require_positive("n", n)
    _require_positive("block", block)
    return min(m, n - 1) // block * block


def shared_prefix_length(a: Sequence[object], b: Sequence[object]) -> int:
    """The number of leading items (tokens or characters) two sequences have in common."""
    for index, (left, right) in enumerate(zip(a, b)):
        if left != right:
            return index
    return min(len(a), len(b))


@dataclass(frozen=True)
class OutputDifference:
    """How two outputs differ: the first differing character (None when identical) and a distance in [0, 1]."""

    first_divergence: int | None
    distance: float

    @property
    def identical(self) -> bool:
        """True when the two outputs were the same text."""
        return self.first_divergence is None


def output_difference(a: str, b: str) -> OutputDifference:
    """Compare two outputs character by character; distance is 1 - difflib's similarity ratio."""
    if a == b:
        return OutputDifference(first_divergence=None, distance=0.0)
    ratio = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
    return OutputDifference(first_divergence=shared_prefix_length(a, b), distance=1.0 - ratio)


def comparison_floor(control_outputs: Sequence[str]) -> OutputDifference:
    """The engine's own run-to-run floor: the largest difference between any two control outputs."""
    if len(control_outputs) < 2:
        raise KvbakeError(
            f"a comparison floor needs at least two control outputs, got {len(control_outputs)}",
            fix="run the uncached control request at least twice",
        )
    pairs = itertools.combinations(control_outputs, 2)
    return max((output_difference(a, b) for a, b in pairs), key=lambda diff: diff.distance)


def within_floor(candidate_diff: OutputDifference, floor_diff: OutputDifference) -> bool:
    """A candidate passes when it differs from its control by no more than the controls differ among themselves."""
    return candidate_diff.distance <= floor_diff.distance + FLOOR_TOLERANCE


def check_fresh_salt(cached: int, label: str = "fresh-salt control") -> None:
    """A request under a never-used cache_salt must report 0 cached tokens; anything else invalidates the run."""
    if cached != 0:
        raise ValidationStop(
            f"{label} reported {cached} cached tokens instead of 0, so cache hits leak across salts "
            "and this run is invalid",
            fix="check that the serve receives cache_salt and isolates its cache by salt, "
            "restore the base serve, and rerun with a new salt",
        )


@dataclass(frozen=True)
class Observation:
    """What one request reported: prompt tokens, cached tokens and the generated text."""

    prompt_tokens: int
    cached_tokens: int
    output: str


@dataclass(frozen=True)
class PrefixObservations:
    """The cold/hit/fresh-salt (and optional partial-prefix) requests of one prefix-identity run.

    cold: the prompt under a new salt; hit: the same prompt and salt again; fresh_salt: the same prompt under
    another new salt. partial: a prompt sharing `shared_tokens` leading tokens with the cold one, under the cold
    salt; partial_control: the partial prompt under a new salt. controls: more uncached outputs of the cold prompt.
    """

    cold: Observation
    hit: Observation
    fresh_salt: Observation
    partial: Observation | None = None
    partial_control: Observation | None = None
    shared_tokens: int | None = None
    controls: tuple[str, ...] = ()
    block: int = DEFAULT_BLOCK


@dataclass(frozen=True)
class Check:
    """One named check of a verdict, whether it passed and what was seen."""

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class PrefixVerdict:
    """Every check of a prefix-identity run, and the comparison floor its output checks used."""

    checks: tuple[Check, ...]
    floor: OutputDifference

    @property
    def failures(self) -> tuple[Check, ...]:
        """The checks that failed."""
        return tuple(check for check in self.checks if not check.passed)

    @property
    def passed(self) -> bool:
        """True when no check failed."""
        return not self.failures


def _count_check(name: str, got: int, expected: int) -> Check:
    return Check(name, got == expected, f"cached_tokens {got}, expected {expected}")


def _identity_check(name: str, candidate: str, control: str, floor: OutputDifference) -> Check:
    diff = output_difference(control, candidate)
    detail = (
        f"distance {diff.distance:.6f} (first divergence at {diff.first_divergence}), "
        f"floor {floor.distance:.6f}"
    )
    return Check(name, within_floor(diff, floor), detail)


def _partial_checks(obs: PrefixObservations, floor: OutputDifference) -> tuple[Check, ...]:
    if obs.partial is None:
        return ()
    if obs.shared_tokens is None:
        raise KvbakeError("a partial-prefix observation needs shared_tokens", fix="pass the shared token count m")
    expected = partial_prefix_cached_tokens(obs.shared_tokens, obs.partial.prompt_tokens, obs.block)
    checks = [_count_check("partial-prefix cached tokens", obs.partial.cached_tokens, expected)]
    if obs.partial_control is not None:
        checks.append(_identity_check("partial-prefix output", obs.partial.output, obs.partial_control.output, floor))
    return tuple(checks)


def score_prefix_sequence(obs: PrefixObservations) -> PrefixVerdict:
    """Score a cold/hit/fresh-salt run; raises ValidationStop when a fresh-salt control saw cached tokens."""
    check_fresh_salt(obs.fresh_salt.cached_tokens)
    if obs.partial_control is not None:
        check_fresh_salt(obs.partial_control.cached_tokens, label="partial-prefix fresh-salt control")
    floor = comparison_floor((obs.cold.output, obs.fresh_salt.output, *obs.controls))
    n = obs.cold.prompt_tokens
    lengths = {obs.cold.prompt_tokens, obs.hit.prompt_tokens, obs.fresh_salt.prompt_tokens}
    checks = (
        Check("same prompt", len(lengths) == 1, f"prompt_tokens cold/hit/fresh-salt {sorted(lengths)}"),
        _count_check("cold cached tokens", obs.cold.cached_tokens, 0),
        _count_check("hit cached tokens", obs.hit.cached_tokens, expected_cached_tokens(n, obs.block)),
        _identity_check("hit output", obs.hit.output, obs.cold.output, floor),
        *_partial_checks(obs, floor),
    )
    return PrefixVerdict(checks=checks, floor=floor)


@dataclass(frozen=True)
class PrefixPrompts:
    """A full prompt and a partial-prefix prompt that shares its first `shared_tokens` estimated tokens."""

    full: str
    partial: str
    n_tokens: int
    shared_tokens: int


def _divergent_marker(next_char: str) -> str:
    return next(marker for marker in DIVERGENCE_MARKERS if not marker.startswith(next_char))


def build_prefix_prompts(corpus: Corpus, n_tokens: int, shared_tokens: int) -> PrefixPrompts:
    """Build two prompts of exactly n_tokens estimated tokens that agree on exactly shared_tokens of them."""
    _require_positive("n", n_tokens)
    _require_non_negative("shared tokens", shared_tokens)
    total = chars_for_tokens(n_tokens)
    body = total - len(SUMMARY_QUESTION)
    if body < 0:
        raise KvbakeError(
            f"{n_tokens} tokens cannot hold the question", fix=f"pass n >= {len(SUMMARY_QUESTION) // 4 + 1}"
        )
    full = corpus_text(corpus, body) + SUMMARY_QUESTION
    shared = chars_for_tokens(shared_tokens)
    marker = _divergent_marker(full[shared]) if shared < total else ""
    rest = body - shared - len(marker)
    if rest < 0:
        raise KvbakeError(
            f"a {n_tokens}-token prompt cannot share {shared_tokens} tokens and still diverge before its question",
            fix="pass a smaller shared token count",
        )
    partial = full[:shared] + marker + corpus_text(corpus, rest, start=1) + SUMMARY_QUESTION
    return PrefixPrompts(full=full, partial=partial, n_tokens=n_tokens, shared_tokens=shared_tokens)
