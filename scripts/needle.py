"""Needle and corruption checks: an offline self-test of codes, prompts and scorers, and a dry run over a corpus."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbake.operate.core.corpus import (  # noqa: E402
    CHARS_PER_TOKEN,
    Corpus,
    Document,
    estimate_tokens,
    load_corpus,
    parse_records,
)
from kvbake.errors import KvbakeError  # noqa: E402
from kvbake.operate.core.needle import (  # noqa: E402
    CORRUPTION_SET_SIZE,
    NEEDLE_PATTERN,
    build_corruption_set,
    build_needle_prompt,
    default_depths,
    find_codes,
    make_needle_codes,
    needle_sentence,
    score_corruption,
)

_TINY_CORPUS = Corpus(
    (
        Document("opinions_cl.jsonl", 1, "The appellate court affirmed the judgment below. " * 20),
        Document("filings_recap.jsonl", 1, "Motion to dismiss filed by the defendant. " * 20),
    )
)


def _raised(action: Callable[[], object]) -> str:
    try:
        action()
    except KvbakeError as err:
        return f"{type(err).__name__}: {err.message}"
    return "no error"


def _needle_depths(ctx: int, depths: tuple[int, ...]) -> tuple[int, int, tuple[int, ...]]:
    """Build a prompt and read back its estimated length, its code count and each code's token depth."""
    codes = make_needle_codes("self-test", len(depths))
    prompt = build_needle_prompt(_TINY_CORPUS, ctx, depths, codes)
    found = tuple(prompt.text.index(needle_sentence(code)) // CHARS_PER_TOKEN for code in codes)
    return prompt.estimated_tokens, len(find_codes(prompt.text)), found


def _corruption_set_shape() -> tuple[int, int, bool]:
    prompts = build_corruption_set(_TINY_CORPUS, 8000, seed="self-test")
    all_codes = {code for prompt in prompts for code in prompt.codes}
    own_only = all(find_codes(prompt.text) == prompt.codes for prompt in prompts)
    return len(prompts), len(all_codes), own_only


def _corruption(answers: dict[int, str]) -> tuple[int, tuple[tuple[int, tuple[str, ...], tuple[str, ...]], ...]]:
    """Score a 16-request set whose answers echo their own codes unless `answers` overrides some."""
    codes = make_needle_codes("self-test", CORRUPTION_SET_SIZE)
    pairs = [((code,), answers.get(i, f"The code is {code}.")) for i, code in enumerate(codes)]
    verdict = score_corruption(pairs)
    failed = tuple((v.index, v.missing, v.foreign) for v in verdict.requests if not v.passed)
    return verdict.passed_count, failed


_CODES = make_needle_codes("self-test", CORRUPTION_SET_SIZE)
_BAD_LINES = ['{"text": "fine"}', '{"body": "no text field"}']

CASES: tuple[tuple[str, Callable[[], object], object], ...] = (
    ("make_needle_codes('kvbake', 3)", lambda: make_needle_codes("kvbake", 3),
     ("NEEDLE-5CBE-120E", "NEEDLE-2CFD-1200", "NEEDLE-E565-690B")),
    ("64 codes are distinct", lambda: len(set(make_needle_codes("kvbake", 64))), 64),
    ("codes match NEEDLE-XXXX-XXXX", lambda: all(NEEDLE_PATTERN.fullmatch(c) for c in _CODES), True),
    ("find_codes keeps order, drops repeats and placeholders",
     lambda: find_codes("NEEDLE-7F3A-19C2 NEEDLE-0000-AAAA NEEDLE-7F3A-19C2 NEEDLE-XXXX-XXXX"),
     ("NEEDLE-7F3A-19C2", "NEEDLE-0000-AAAA")),
    ("estimate_tokens of 0, 4, 5 and 4000 characters",
     lambda: tuple(estimate_tokens("x" * k) for k in (0, 4, 5, 4000)), (0, 1, 2, 1000)),
    ("default_depths(8000)", lambda: default_depths(8000), (4000, 7200)),
    ("needles at 450K and 500K in a 524288-token prompt",
     lambda: _needle_depths(524288, (450000, 500000)), (524288, 2, (450000, 500000))),
    ("needles at 10, 2000 and 7000 in an 8000-token prompt",
     lambda: _needle_depths(8000, (10, 2000, 7000)), (8000, 3, (10, 2000, 7000))),
    ("a needle past the question is refused",
     lambda: _raised(lambda: _needle_depths(8000, (7990,))).split(":")[0], "KvbakeError"),
    ("corruption set: prompts, distinct codes, each holds only its own", _corruption_set_shape, (16, 32, True)),
    ("16 clean answers", lambda: _corruption({}), (16, ())),
    ("request 5 shows request 9's code", lambda: _corruption({5: f"{_CODES[5]}, {_CODES[9]}"}),
     (15, ((5, (), (_CODES[9],)),))),
    ("request 3 lacks its code", lambda: _corruption({3: "I found no code."}), (15, ((3, (_CODES[3],), ()),))),
    ("an unknown code alone does not fail", lambda: _corruption({0: f"{_CODES[0]} NEEDLE-0000-0000"}), (16, ())),
    ("a record without 'text' names its file and line",
     lambda: _raised(lambda: parse_records("opinions_cl.jsonl", _BAD_LINES)).split(":")[:2],
     ["CorpusError", " opinions_cl.jsonl line 2"]),
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
    print(f"needle self-test: {len(CASES) - misses}/{len(CASES)} checks passed")
    return misses


def dry_run(ctx: int, depths: tuple[int, ...], seed: str, data_dir: Path) -> None:
    """Build the recall prompt and the corruption set from the corpus and print their estimated token counts."""
    corpus = load_corpus(data_dir)
    recall = build_needle_prompt(corpus, ctx, depths, make_needle_codes(f"{seed}-recall", len(depths)))
    prompts = build_corruption_set(corpus, ctx, seed=f"{seed}-corruption")
    lengths = sorted({prompt.estimated_tokens for prompt in prompts})
    codes = [code for prompt in prompts for code in prompt.codes]
    print(f"needle dry run; token counts are estimates ({CHARS_PER_TOKEN} characters per token)")
    print(f"corpus: {len(corpus.documents)} records from {', '.join(corpus.sources)}, {corpus.total_chars} characters")
    print(f"recall prompt: {recall.estimated_tokens} tokens (estimate)")
    for code, depth in zip(recall.codes, recall.depths):
        print(f"  {code} at token {depth} (estimate)")
    print(f"corruption set: {len(prompts)} requests of {'/'.join(map(str, lengths))} tokens each (estimate)")
    print(f"  {len(codes)} codes, {len(prompts[0].codes)} per request, all distinct: {len(set(codes)) == len(codes)}")


def _depths(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"depths must be comma-separated token counts, got {text!r}") from err


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line; exactly one of --self-test and --dry-run."""
    parser = argparse.ArgumentParser(description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--self-test", action="store_true", help="run the offline checks")
    mode.add_argument("--dry-run", action="store_true", help="build prompts from a corpus; print estimates")
    parser.add_argument("--ctx", type=int, default=8000, help="prompt length in tokens (estimate)")
    parser.add_argument("--depths", type=_depths, help="needle depths in tokens, e.g. 450000,500000")
    parser.add_argument("--seed", default="kvbake", help="seed of the needle codes")
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
        dry_run(args.ctx, args.depths or default_depths(args.ctx), args.seed, args.data_dir)
    except KvbakeError as err:
        print(f"error: {err.one_line()}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
