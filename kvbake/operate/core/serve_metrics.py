"""The serve's Prometheus counters that the plan reads (preemptions under pool pressure), parsed from /metrics text."""

from __future__ import annotations

import re
from dataclasses import replace

from kvbake.operate.core.validate_plan import StepResult

PREEMPTIONS = "vllm:num_preemptions_total"
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


def counter_total(text: str, name: str) -> float | None:
    """The sum of a counter over all its label sets, or None when the text has no sample of it."""
    total, found = 0.0, False
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match["name"] != name:
            continue
        try:
            total += float(match["value"])
        except ValueError:
            continue
        found = True
    return total if found else None


def preemptions_during(before: float | None, after: float | None) -> int | None:
    """How many preemptions the serve counted between two readings; None when it does not expose the counter."""
    if before is None or after is None:
        return None
    return max(0, int(after - before))


def with_preemptions(result: StepResult, preemptions: int | None) -> StepResult:
    """The pressure step with the preemptions it caused; pressure that preempted nothing did not test what it should."""
    data = {**result.data, "preemptions": preemptions}
    if preemptions is None:
        summary = f"{result.summary}; preemptions not counted (the serve exposes no {PREEMPTIONS})"
        return replace(result, summary=summary, data=data)
    summary = f"{result.summary}; {preemptions} preemption(s) ({PREEMPTIONS})"
    if preemptions > 0 or result.stop:
        return replace(result, summary=summary, data=data)
    stop = (f"no preemption: {result.data['requests']} concurrent {result.data['prompt_tokens'][-1]}-token requests "
            "did not exceed the KV pool, so the step did not force pool pressure")
    return replace(result, summary=summary, data=data, stop=stop, fix=DERIVED_FIX if "derivation" in data else COUNTED_FIX)


COUNTED_FIX = ("pass --pressure auto (derived from the KV pool), or raise --pressure or --pressure-tokens until the requests exceed "
               "the pool (scripts/kv_arith.py --pressure predicts how many), then run again")
DERIVED_FIX = ("the requests it admits together outgrow the pool it reports, so the serve schedules with another pool or other "
               "limits than the report's derivation names: compare them with the serve's log and the preset's launcher_args")
