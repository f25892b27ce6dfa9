"""The identity oracle, pure: at temperature 0 a response under concurrency or on a cache hit equals its cold run."""

from __future__ import annotations

from collections.abc import Sequence

from kvbake.operate.core.completions import Completion
from kvbake.operate.core.needle import NeedlePrompt, score_corruption
from kvbake.operate.core.prefix_identity import Check, check_fresh_salt, expected_cached_tokens, shared_prefix_length
from kvbake.operate.core.validate_plan import FAILED_FIX, STEPS, StepResult, foreign_stop, with_pressure_note

EXCERPT_CHARS = 8  # characters shown on each side of the first difference


def excerpt(text: str, at: int) -> str:
    """The text around character `at` (counted from 0), quoted, with '…' where it is cut."""
    start, end = max(0, at - EXCERPT_CHARS), at + EXCERPT_CHARS
    return repr(("…" if start else "") + text[start:end] + ("…" if end < len(text) else ""))


def first_difference(candidate: str, reference: str) -> str | None:
    """None for equal texts, else "at character N ('…' vs '…')", the candidate's excerpt first."""
    if candidate == reference:
        return None
    at = shared_prefix_length(candidate, reference)
    return f"at character {at} ({excerpt(candidate, at)} vs {excerpt(reference, at)})"


def _fresh(name: str, concurrent: Sequence[Completion], solo: Sequence[Completion]) -> None:
    for index, completion in enumerate(concurrent, start=1):
        check_fresh_salt(completion.cached_tokens, f"{name} request {index} (fresh salt)")
    for index, completion in enumerate(solo, start=1):
        check_fresh_salt(completion.cached_tokens, f"{name} request {index} solo (fresh salt)")


def score_identity_set(name: str, prompts: Sequence[NeedlePrompt], concurrent: Sequence[Completion],
                       solo: Sequence[Completion]) -> StepResult:
    """Each concurrent answer must equal its solo cold run; a foreign code in a concurrent answer stops first."""
    _fresh(name, concurrent, solo)
    verdict = score_corruption([(p.codes, c.text) for p, c in zip(prompts, concurrent)])
    owner = {code: i for i, p in enumerate(prompts) for code in p.codes}
    differences = [first_difference(c.text, s.text) for c, s in zip(concurrent, solo)]
    checks = tuple(Check(f"request {r.index + 1}", diff is None and not r.foreign, _detail(diff, r.foreign, owner))
                   for r, diff in zip(verdict.requests, differences))
    foreign = [(r.index, code) for r in verdict.requests for code in r.foreign]
    stop = None
    if foreign:
        stop = foreign_stop(foreign, owner, sum(1 for r in verdict.requests if r.foreign))
    elif any(differences):
        index, diff = next((i, d) for i, d in enumerate(differences) if d)
        stop = f"incorrect output: request {index + 1} under concurrency differs from its solo cold run {diff}"
    identical = differences.count(None)
    summary = f"{identical}/{len(prompts)} requests identical to their solo cold runs, {len(foreign)} foreign codes"
    data = {"oracle": "identity", "requests": len(prompts), "identical": identical, "foreign": len(foreign),
            "prompt_tokens": sorted({c.prompt_tokens for c in (*concurrent, *solo)})}
    summary = with_pressure_note(name, summary, data)
    return StepResult(name, summary, checks, data, stop, FAILED_FIX if stop else None)


def _detail(diff: str | None, foreign: Sequence[str], owner: dict[str, int]) -> str:
    parts = [f"differs from its solo cold run {diff}" if diff else "identical to its solo cold run"]
    return "; ".join(parts + [f"foreign {code} (request {owner[code] + 1})" for code in foreign])


def _needle_checks(cold: Completion, hit: Completion, fresh: Completion, block: int) -> tuple[Check, ...]:
    lengths = sorted({cold.prompt_tokens, hit.prompt_tokens, fresh.prompt_tokens})
    expected = expected_cached_tokens(cold.prompt_tokens, block)
    hit_diff, fresh_diff = first_difference(hit.text, cold.text), first_difference(fresh.text, cold.text)
    return (
        Check("same prompt", len(lengths) == 1, f"the needle prompt's prompt_tokens cold/hit/fresh-salt {lengths}"),
        Check("hit cached tokens", hit.cached_tokens == expected,
              f"the needle prompt's cache hit reported cached_tokens {hit.cached_tokens}, expected {expected}"),
        Check("hit output", hit_diff is None, f"the needle prompt's prefix-cache hit differs from its cold run {hit_diff}"
              if hit_diff else "identical to its cold run"),
        Check("fresh-salt output", fresh_diff is None, f"the needle prompt under a fresh salt differs from its cold run "
              f"{fresh_diff}" if fresh_diff else "identical to its cold run"),
    )


def score_needles_identity(prompt: NeedlePrompt, cold: Completion, hit: Completion, fresh: Completion,
                           block: int) -> StepResult:
    """Cold (new salt A), hit (salt A again: the block rule's cached count) and fresh salt B: one text."""
    check_fresh_salt(cold.cached_tokens, "needle request (fresh salt)")
    check_fresh_salt(fresh.cached_tokens, "needle fresh-salt request")
    checks = _needle_checks(cold, hit, fresh, block)
    failed = next((c for c in checks if not c.passed), None)
    kind = "unexpected cached count" if failed and "cached" in failed.name else "incorrect output"
    stop = f"{kind}: {failed.detail}" if failed else None
    summary = (f"{sum(c.passed for c in checks)}/{len(checks)} checks: cold, hit (cached {hit.cached_tokens}) and "
               f"fresh-salt runs of a {cold.prompt_tokens}-token prompt with needles at {', '.join(map(str, prompt.depths))}")
    data = {"oracle": "identity", "depths": list(prompt.depths), "prompt_tokens": cold.prompt_tokens,
            "codes": list(prompt.codes), "cached_tokens": {"cold": cold.cached_tokens, "hit": hit.cached_tokens,
                                                           "fresh_salt": fresh.cached_tokens}}
    return StepResult(STEPS[3], summary, checks, data, stop, FAILED_FIX if stop else None)
