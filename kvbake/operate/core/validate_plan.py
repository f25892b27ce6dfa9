"""The supervised test plan, pure: options and prompt sizes, the synthetic filler, step scorers and stop reasons."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvbake.errors import PresetError, UsageError
from kvbake.manifest import Preset
from kvbake.operate.core.completions import Completion
from kvbake.operate.core.corpus import Corpus, Document
from kvbake.operate.core.needle import NeedlePrompt, default_depths, score_corruption, score_recall
from kvbake.operate.core.oracle import OracleChoice, initial_choice, oracle_to_dict
from kvbake.operate.core.prefix_identity import Check, PrefixObservations, check_fresh_salt, comparison_floor, score_prefix_sequence
from kvbake.serve.core.presets import ChosenPreset

STEPS = ("inertness", "prefix identity", "corruption set", "needles", "pressure")
DEFAULT_PREFIX_TOKENS = 8000
DEFAULT_CORRUPTION_TOKENS = 8000
NEEDLE_FRACTION = 0.9  # default needle prompt: 90 % of max-model-len, needles at 50 % and 90 % of it
NEEDLE_TAIL = 2048  # tokens after the deepest requested needle
ANSWER_TOKENS = 64
INERTNESS_RUNS = 3
PRESSURE_AUTO = "auto"
PRESSURE_NOTE = "preemptions are counted from the serve's /metrics; eviction is not visible through the API"
FAILED_FIX = "restore the base serve (or pass --rollback-on-failure), read the report, and find the cause before another run"
SYNTHETIC = "synthetic built-in filler (deterministic; not a public corpus)"
_WORDS = ("the court", "the clerk", "a motion", "the record", "the docket", "an exhibit", "the panel", "a witness",
          "the filing", "the order", "counsel", "the hearing", "the claim", "a schedule", "the parties", "the ruling")
_VERBS = ("entered", "reviewed", "noted", "amended", "cited", "set aside", "granted", "denied", "received", "sealed")


def synthetic_corpus(records: int = 48, sentences: int = 40) -> Corpus:
    """Deterministic filler records (hash-chosen words), used when no --corpus is given; holds no needle code."""
    documents = []
    for index in range(records):
        words = []
        for sentence in range(sentences):
            digest = hashlib.sha256(f"kvbake-filler:{index}:{sentence}".encode()).digest()
            subject, verb, obj = _WORDS[digest[0] % 16], _VERBS[digest[1] % 10], _WORDS[digest[2] % 16]
            words.append(f"{subject.capitalize()} {verb} {obj} on day {digest[3] + 1} of record {index + 1}.")
        documents.append(Document("synthetic", index + 1, " ".join(words)))
    return Corpus(tuple(documents))


def parse_depths(text: str | None) -> tuple[int, ...] | None:
    """'450000,500000' -> (450000, 500000); None stays None (the default depths)."""
    if text is None:
        return None
    try:
        depths = tuple(sorted(int(part) for part in text.split(",") if part.strip()))
    except ValueError:
        raise UsageError(f"--depths {text!r} is not a list of token counts", "pass e.g. --depths 450000,500000") from None
    if not depths or depths[0] < 0:
        raise UsageError(f"--depths {text!r} needs one or more non-negative token counts", "pass e.g. --depths 450000,500000")
    return depths


@dataclass(frozen=True)
class PlanOptions:
    """Sizes and seeds of one run; every length is in estimated tokens and fits the preset's max-model-len."""

    preset: Preset
    salt_prefix: str
    seed: str = "kvbake"
    prefix_tokens: int = DEFAULT_PREFIX_TOKENS
    corruption_tokens: int = DEFAULT_CORRUPTION_TOKENS
    depths: tuple[int, ...] = ()
    needle_tokens: int = 0
    pressure: int = 0
    pressure_tokens: int = 0
    oracle: str = "auto"
    pressure_auto: bool = False  # --pressure auto: the count, the prompt length and max_tokens come from the KV pool

    @property
    def runs_pressure(self) -> bool:
        return self.pressure_auto or self.pressure > 0

    @property
    def control(self) -> bool:
        """The control preset sets no switch; its first step is the inertness check."""
        return not self.preset.switches

    def salt(self, label: str) -> str:
        return f"{self.salt_prefix}-{label}"


def parse_pressure(text: str | int) -> int | str:
    """--pressure: 'auto' (derived from the serve's KV pool) or a count of requests."""
    if isinstance(text, int) or text.strip().isdigit():
        return int(text)
    if text.strip().lower() == PRESSURE_AUTO:
        return PRESSURE_AUTO
    raise UsageError(f"--pressure {text!r} is neither auto nor a number of requests",
                     "pass --pressure auto (derived from the KV pool) or --pressure N")


def make_options(preset: Preset, salt_prefix: str, seed: str, depths: tuple[int, ...] | None, prefix_tokens: int,
                 corruption_tokens: int, pressure: int | str, pressure_tokens: int | None, oracle: str = "auto") -> PlanOptions:
    """Fill in the default depths and sizes, then refuse anything that does not fit max-model-len."""
    initial_choice(oracle)  # refuses an unknown oracle
    pressure = parse_pressure(pressure)
    auto = pressure == PRESSURE_AUTO
    if auto and pressure_tokens is not None:
        raise UsageError("--pressure-tokens goes with --pressure N only", "drop it: --pressure auto derives the prompt length "
                         "from the KV pool")
    limit = preset.max_model_len - ANSWER_TOKENS
    if depths is None:
        needle_tokens = int(preset.max_model_len * NEEDLE_FRACTION)
        depths = default_depths(needle_tokens)
    else:
        needle_tokens = min(depths[-1] + NEEDLE_TAIL, limit)
    count = 0 if auto else int(pressure)
    options = PlanOptions(preset, salt_prefix, seed, prefix_tokens, corruption_tokens, tuple(depths), needle_tokens,
                          count, pressure_tokens or needle_tokens, oracle, auto)
    sizes = {"--prefix-tokens": prefix_tokens, "--corruption-tokens": corruption_tokens}
    if not auto:
        sizes["--pressure-tokens"] = options.pressure_tokens
    too_long = [f"{flag} {value}" for flag, value in sizes.items() if value > limit]
    too_long += [f"needle depth {depth}" for depth in depths if depth >= needle_tokens - 32]
    if too_long:
        raise PresetError(f"too long for preset {preset.name} (max-model-len {preset.max_model_len}): {', '.join(too_long)}",
                          f"keep prompts and depths below {limit} tokens (the answer needs {ANSWER_TOKENS})")
    if count < 0:
        raise UsageError(f"--pressure {count} is negative", "pass the number of concurrent long requests, e.g. 4")
    return options


@dataclass(frozen=True)
class StepResult:
    """One step of the plan: its checks, what it measured, and why it stopped the run (None: passed)."""

    name: str
    summary: str
    checks: tuple[Check, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    stop: str | None = None
    fix: str | None = None
    ran: bool = True

    @property
    def passed(self) -> bool:
        return self.ran and self.stop is None


def not_run(name: str, why: str) -> StepResult:
    return StepResult(name, why, ran=False)


def stopped(name: str, reason: str, fix: str | None) -> StepResult:
    """A step that a ValidationStop ended (an unreachable endpoint, an HTTP error, a salt leak, the memory floor)."""
    return StepResult(name, "stopped", stop=reason, fix=fix or FAILED_FIX)


def _first_failure(checks: Sequence[Check]) -> str | None:
    for check in checks:
        if not check.passed:
            kind = "unexpected cached count" if "cached" in check.name else "incorrect output"
            return f"{kind}: {check.name}: {check.detail}"
    return None


def _result(name: str, summary: str, checks: Sequence[Check], data: Mapping[str, Any]) -> StepResult:
    stop = _first_failure(checks)
    return StepResult(name, summary, tuple(checks), dict(data), stop, FAILED_FIX if stop else None)


def score_inertness(completions: Sequence[Completion], control: bool) -> StepResult:
    """Fixed prompt under fresh salts: 0 cached tokens each (else the run is invalid); identical outputs for control."""
    for index, completion in enumerate(completions, start=1):
        check_fresh_salt(completion.cached_tokens, f"inertness fresh-salt request {index}")
    texts = [c.text for c in completions]
    floor = comparison_floor(texts)
    lengths = sorted({c.prompt_tokens for c in completions})
    checks = [Check("same prompt", len(lengths) == 1, f"prompt_tokens {lengths}")]
    if control:
        checks.append(Check("identical outputs", floor.identical, f"distance {floor.distance:.6f} between {len(texts)} runs"))
    name = STEPS[0] if control else "baseline"
    summary = (f"{len(texts)} fresh-salt runs: 0 cached tokens each, run-to-run distance {floor.distance:.6f}"
               + ("" if control else " (recorded as the floor; identity is required only for the control preset)"))
    data = {"runs": len(texts), "floor": floor.distance, "prompt_tokens": lengths[0],
            "output_sha256": hashlib.sha256(texts[0].encode()).hexdigest()}
    return _result(name, summary, checks, data)


def score_prefix(observations: PrefixObservations) -> StepResult:
    """Cold, hit, fresh salt and partial prefix, scored by prefix_identity (a leaking salt stops the run)."""
    verdict = score_prefix_sequence(observations)
    counts = {"cold": observations.cold.cached_tokens, "hit": observations.hit.cached_tokens,
              "fresh_salt": observations.fresh_salt.cached_tokens,
              "partial": observations.partial.cached_tokens if observations.partial else None}
    data = {"prompt_tokens": observations.cold.prompt_tokens, "shared_tokens": observations.shared_tokens,
            "block": observations.block, "cached_tokens": counts, "floor": verdict.floor.distance}
    summary = f"{len(verdict.checks) - len(verdict.failures)}/{len(verdict.checks)} checks; cached {counts}"
    return _result(STEPS[1], summary, verdict.checks, data)


def score_needle_set(name: str, prompts: Sequence[NeedlePrompt], completions: Sequence[Completion]) -> StepResult:
    """Concurrent requests with their own codes: a missing own code or any other request's code stops the run."""
    for index, completion in enumerate(completions, start=1):
        check_fresh_salt(completion.cached_tokens, f"{name} request {index} (fresh salt)")
    verdict = score_corruption([(p.codes, c.text) for p, c in zip(prompts, completions)])
    owner = {code: i for i, p in enumerate(prompts) for code in p.codes}
    checks = tuple(Check(f"request {r.index + 1}", r.passed, _needle_detail(r.missing, r.foreign, r.unknown, owner))
                   for r in verdict.requests)
    foreign = [(r.index, code) for r in verdict.requests for code in r.foreign]
    stop = None
    if foreign:
        stop = foreign_stop(foreign, owner, len(prompts) - verdict.passed_count)
    elif not verdict.passed:
        stop = f"incorrect output: {next(c for c in checks if not c.passed).name}: {next(c for c in checks if not c.passed).detail}"
    summary = f"{verdict.passed_count}/{len(prompts)} requests correct, {len(foreign)} foreign codes"
    data = {"requests": len(prompts), "passed": verdict.passed_count, "foreign": len(foreign),
            "prompt_tokens": sorted({c.prompt_tokens for c in completions})}
    summary = with_pressure_note(name, summary, data)
    return StepResult(name, summary, checks, data, stop, FAILED_FIX if stop else None)


def foreign_stop(foreign: Sequence[tuple[int, str]], owner: Mapping[str, int], failing: int) -> str:
    """The stop for (request index, foreign code) pairs: the first one, and how many there were."""
    index, code = foreign[0]
    return (f"cross-request corruption: request {index + 1} answered with request {owner[code] + 1}'s code {code} "
            f"({len(foreign)} foreign code(s) in {failing} request(s))")


def with_pressure_note(name: str, summary: str, data: dict[str, Any]) -> str:
    """The pressure step's summary names its request size, and its data says where preemption is read."""
    if name != STEPS[4]:
        return summary
    data["note"] = PRESSURE_NOTE
    return summary + f", {data['requests']} concurrent {data['prompt_tokens'][-1]}-token requests"


def _needle_detail(missing: Sequence[str], foreign: Sequence[str], unknown: Sequence[str], owner: Mapping[str, int]) -> str:
    parts = [f"missing {', '.join(missing)}"] if missing else []
    parts += [f"foreign {code} (request {owner[code] + 1})" for code in foreign]
    parts += [f"unknown {', '.join(unknown)} (not a failure)"] if unknown else []
    return "; ".join(parts) or "every own code, no foreign code"


def score_needles(prompt: NeedlePrompt, completion: Completion) -> StepResult:
    """One long prompt with needles at the requested depths: every code must come back."""
    check_fresh_salt(completion.cached_tokens, "needle request (fresh salt)")
    verdict = score_recall(prompt.codes, completion.text)
    checks = tuple(Check(f"needle at {depth}", code not in verdict.missing, f"{code} at token {depth} (estimate)")
                   for depth, code in zip(prompt.depths, prompt.codes))
    summary = (f"{len(checks) - len(verdict.missing)}/{len(checks)} needles recalled at "
               f"{', '.join(map(str, prompt.depths))} in a {completion.prompt_tokens}-token prompt")
    data = {"depths": list(prompt.depths), "prompt_tokens": completion.prompt_tokens, "codes": list(prompt.codes)}
    return _result(STEPS[3], summary, checks, data)


@dataclass(frozen=True)
class Report:
    """One run: the preset, endpoint, release record, corpus, every step, the memory readings and the rollback."""

    chosen: ChosenPreset
    endpoint: str
    model: str | None
    release: Mapping[str, Any]
    corpus: str
    started: str  # e.g. 2026-10-23T10:15:00Z
    finished: str
    steps: tuple[StepResult, ...]
    memory: Mapping[str, Any]
    rollback: str
    oracle: OracleChoice = initial_choice("auto")

    @property
    def stop(self) -> StepResult | None:
        return next((step for step in self.steps if step.stop), None)

    @property
    def name(self) -> str:
        """The report's file stem: <timestamp>-<preset>."""
        return f"{self.started.replace('-', '').replace(':', '')}-{self.chosen.preset.name}"


def report_to_dict(report: Report) -> dict[str, Any]:
    preset, stop = report.chosen.preset, report.stop
    return {
        "preset": preset.name, "status": preset.status, "override": report.chosen.override,
        "max_model_len": preset.max_model_len, "switches": dict(preset.switches), "endpoint": report.endpoint,
        "model": report.model, "release": dict(report.release), "corpus": report.corpus,
        "oracle": oracle_to_dict(report.oracle), "started": report.started, "finished": report.finished,
        "outcome": "stopped" if stop else "passed",
        "stop": {"step": stop.name, "reason": stop.stop, "fix": stop.fix} if stop else None,
        "steps": [{"name": s.name, "ran": s.ran, "passed": s.passed, "summary": s.summary, "stop": s.stop,
                   "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in s.checks],
                   "data": dict(s.data)} for s in report.steps],
        "memory": dict(report.memory), "rollback": report.rollback,
    }


def _memory_line(memory: Mapping[str, Any]) -> str:
    floor = f"floor {memory['floor_bytes'] / 1024 ** 3:.2f} GiB"
    if not memory["watched"]:
        return f"{floor}; not watched (no --deploy)"
    lows = ", ".join(f"{node} {value / 1024 ** 3:.2f} GiB" for node, value in memory["lowest_bytes"].items())
    return f"{floor}; lowest MemAvailable {lows or 'not read'} ({memory['samples']} samples)"


def report_text(report: Report) -> str:
    """The readable summary: header, one line per step with its failing checks, the result."""
    preset, stop = report.chosen.preset, report.stop
    lines = [f"validate {preset.name} ({preset.status}, max-model-len {preset.max_model_len}) against {report.endpoint}"
             f" (model {report.model or 'unknown'})",
             f"override: {report.chosen.override}" if report.chosen.override else "override: none",
             f"release:  {report.release['text']}", f"corpus:   {report.corpus}", f"oracle:   {report.oracle.text}",
             f"memory:   {_memory_line(report.memory)}",
             f"run:      {report.started} .. {report.finished}"]
    for number, step in enumerate(report.steps, start=1):
        state = "passed" if step.passed else "STOPPED" if step.stop else "-"
        lines.append(f"{number} {step.name:<16} {state:<8} {step.summary}")
        lines += [f"      FAIL {c.name}: {c.detail}" for c in step.checks if not c.passed]
    result = f"STOPPED at {stop.name}: {stop.stop}" if stop else "PASSED: every step that ran passed"
    return "\n".join(lines + [f"result:   {result}", f"rollback: {report.rollback}"]) + "\n"
