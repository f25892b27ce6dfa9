"""Prefix-identity check: an offline self-test of the scorer and cache arithmetic, and a dry run over a corpus."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbake.operate.core.corpus import CHARS_PER_TOKEN, Corpus, Document, estimate_tokens, load_corpus  # noqa: E402
from kvbake.errors import KvbakeError, ValidationStop  # noqa: E402
from kvbake.operate.core.prefix_identity import (  # noqa: E402
    DEFAULT_BLOCK,
    Observation,
    OutputDifference,
    PrefixObservations,
    build_prefix_prompts,
    check_fresh_salt,
    comparison_floor,
    expected_cached_tokens,
    output_difference,
    partial_prefix_cached_tokens,
    score_prefix_sequence,
    shared_prefix_length,
    within_floor,
)


def _raised(action: Callable[[], object]) -> str:
    try:
        action()
    except KvbakeError as err:
        return type(err).__name__
    return "no error"


def _same() -> OutputDifference:
    return OutputDifference(first_divergence=None, distance=0.0)


def _diff(a: str, b: str) -> tuple[int | None, float]:
    diff = output_difference(a, b)
    return diff.first_divergence, round(diff.distance, 6)


HELD = "The court held that the claim was timely."


def _run(**changes: object) -> object:
    """Score an n=8000 run that is correct unless `changes` replace some of its observations."""
    good = {
        "cold": Observation(8000, 0, HELD),
        "hit": Observation(8000, 7680, HELD),
        "fresh_salt": Observation(8000, 0, HELD),
        "partial": Observation(8000, 768, "The filing was late."),
        "partial_control": Observation(8000, 0, "The filing was late."),
        "shared_tokens": 1000,
    }
    verdict = score_prefix_sequence(PrefixObservations(**{**good, **changes}))  # type: ignore[arg-type]
    return tuple(check.name for check in verdict.failures)


_TINY_CORPUS = Corpus(
    (Document("opinions_cl.jsonl", 1, "The court held. " * 40), Document("filings_recap.jsonl", 1, "Filed. " * 30))
)


def _prompt_shape() -> tuple[int, int, int]:
    prompts = build_prefix_prompts(_TINY_CORPUS, 1000, 300)
    shared_chars = shared_prefix_length(prompts.full, prompts.partial)
    return estimate_tokens(prompts.full), estimate_tokens(prompts.partial), shared_chars


CASES: tuple[tuple[str, Callable[[], object], object], ...] = (
    ("expected_cached_tokens(8000, 384)", lambda: expected_cached_tokens(8000, 384), 7680),
    ("expected_cached_tokens(385, 384)", lambda: expected_cached_tokens(385, 384), 384),
    ("expected_cached_tokens(384, 384)", lambda: expected_cached_tokens(384, 384), 0),
    ("expected_cached_tokens(1, 384)", lambda: expected_cached_tokens(1, 384), 0),
    ("expected_cached_tokens(769, 384)", lambda: expected_cached_tokens(769, 384), 768),
    ("expected_cached_tokens(327680, 384)", lambda: expected_cached_tokens(327680, 384), 327552),
    ("expected_cached_tokens(0) is refused", lambda: _raised(lambda: expected_cached_tokens(0)), "KvbakeError"),
    ("partial_prefix_cached_tokens(1000, 8000, 384)", lambda: partial_prefix_cached_tokens(1000, 8000, 384), 768),
    ("partial_prefix_cached_tokens(8000, 8000, 384)", lambda: partial_prefix_cached_tokens(8000, 8000, 384), 7680),
    ("partial_prefix_cached_tokens(383, 8000, 384)", lambda: partial_prefix_cached_tokens(383, 8000, 384), 0),
    ("partial_prefix_cached_tokens(5000, 1000, 384)", lambda: partial_prefix_cached_tokens(5000, 1000, 384), 768),
    ("output_difference(same, same)", lambda: _diff("same", "same"), (None, 0.0)),
    ("output_difference('abcd', 'abxy')", lambda: _diff("abcd", "abxy"), (2, 0.5)),
    ("output_difference('abc', 'abcdef')", lambda: _diff("abc", "abcdef"), (3, 0.333333)),
    ("comparison_floor(abcd, abcd, abxy)", lambda: comparison_floor(["abcd", "abcd", "abxy"]).distance, 0.5),
    ("within_floor(0.0, floor 0.0)", lambda: within_floor(_same(), _same()), True),
    ("within_floor(0.5, floor 0.0)", lambda: within_floor(OutputDifference(2, 0.5), _same()), False),
    ("within_floor(0.25, floor 0.5)", lambda: within_floor(OutputDifference(9, 0.25), OutputDifference(2, 0.5)), True),
    ("check_fresh_salt(0)", lambda: _raised(lambda: check_fresh_salt(0)), "no error"),
    ("check_fresh_salt(384) stops the run", lambda: _raised(lambda: check_fresh_salt(384)), ValidationStop.__name__),
    ("cold/hit/fresh-salt/partial sequence, all correct", lambda: _run(), ()),
    ("sequence with hit reporting 7296", lambda: _run(hit=Observation(8000, 7296, HELD)), ("hit cached tokens",)),
    ("sequence with a diverged hit output", lambda: _run(hit=Observation(8000, 7680, HELD[:-8])), ("hit output",)),
    (
        "sequence with partial reporting 384",
        lambda: _run(partial=Observation(8000, 384, "The filing was late.")),
        ("partial-prefix cached tokens",),
    ),
    ("sequence with cold reporting 384", lambda: _run(cold=Observation(8000, 384, HELD)), ("cold cached tokens",)),
    (
        "sequence with fresh salt reporting 7680",
        lambda: _raised(lambda: _run(fresh_salt=Observation(8000, 7680, HELD))),
        "ValidationStop",
    ),
    ("prompts n=1000 shared=300: tokens full, partial, shared chars", _prompt_shape, (1000, 1000, 1200)),
)


def self_test() -> int:
    """Run every offline check, print one line each, and return how many missed."""
    misses = 0
    for name, action, expected in CASES:
        got = action()
        if got == expected:
            print(f"ok    {name} = {got!r}")
        else:
            misses += 1
            print(f"FAIL  {name} = {got!r}, expected {expected!r}")
    print(f"prefix_identity self-test: {len(CASES) - misses}/{len(CASES)} checks passed")
    return misses


def dry_run(n_tokens: int, shared_tokens: int, block: int, data_dir: Path) -> None:
    """Build the full and partial-prefix prompts from the corpus and print their estimated token counts."""
    corpus = load_corpus(data_dir)
    prompts = build_prefix_prompts(corpus, n_tokens, shared_tokens)
    n_full, n_partial = estimate_tokens(prompts.full), estimate_tokens(prompts.partial)
    print(f"prefix identity dry run; token counts are estimates ({CHARS_PER_TOKEN} characters per token)")
    print(f"corpus: {len(corpus.documents)} records from {', '.join(corpus.sources)}, {corpus.total_chars} characters")
    print(f"full prompt:    {n_full} tokens (estimate)")
    print(f"partial prompt: {n_partial} tokens (estimate), sharing the first {shared_tokens} tokens (estimate)")
    print(f"expected cached tokens at block {block}, from the estimates:")
    print("  cold        0")
    print(f"  hit         {expected_cached_tokens(n_full, block)} (estimate)")
    print("  fresh salt  0")
    print(f"  partial     {partial_prefix_cached_tokens(shared_tokens, n_partial, block)} (estimate)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line; exactly one of --self-test and --dry-run."""
    parser = argparse.ArgumentParser(description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--self-test", action="store_true", help="run the offline checks")
    mode.add_argument("--dry-run", action="store_true", help="build prompts from a corpus; print estimates")
    parser.add_argument("--n", type=int, default=8000, help="prompt length in tokens (estimate)")
    parser.add_argument("--shared", type=int, help="tokens the partial prompt shares (default n/2)")
    parser.add_argument("--block", type=int, default=DEFAULT_BLOCK, help="prefix-cache hit granularity")
    parser.add_argument("--data-dir", type=Path, help="folder with opinions_cl.jsonl and filings_recap.jsonl")
    args = parser.parse_args(argv)
    if args.dry_run and args.data_dir is None:
        parser.error("--dry-run needs --data-dir")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the chosen mode; a KvbakeError becomes one line on stderr and its exit code."""
    args = parse_args(argv)
    try:
        if args.self_test:
            return 1 if self_test() else 0
        shared = args.n // 2 if args.shared is None else args.shared
        dry_run(args.n, shared, args.block, args.data_dir)
    except KvbakeError as err:
        print(f"error: {err.one_line()}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
