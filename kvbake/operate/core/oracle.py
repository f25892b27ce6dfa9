"""Which oracle scores the corruption set, needles and pressure, pure: the recall probe, the choice and its report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbake.errors import UsageError
from kvbake.operate.core.completions import Completion
from kvbake.operate.core.corpus import Corpus
from kvbake.operate.core.needle import NeedlePrompt, build_needle_prompt, find_codes, make_needle_codes
from kvbake.operate.core.prefix_identity import check_fresh_salt

ORACLES = ("auto", "recall", "identity")
PROBE_TOKENS = 400  # the recall probe: a few hundred tokens of filler around one code
PROBE_DEPTH = 200
PROBE_START = 5  # its filler starts at this record, unlike every other prompt of the plan
RECALLED = "auto: the recall probe's answer contained its code"
NOT_RECALLED = "auto: the recall probe's answer did not contain its code"
NOT_CHOSEN = "auto: the run stopped before the recall probe chose one"


@dataclass(frozen=True)
class OracleChoice:
    """The oracle asked for (--oracle), the one used (None: the run stopped before auto chose) and why."""

    requested: str
    used: str | None
    reason: str

    @property
    def text(self) -> str:
        """e.g. 'identity (auto: the recall probe's answer did not contain its code)'."""
        return f"{self.used or 'not chosen'} ({self.reason})"


def check_oracle(name: str) -> str:
    """The --oracle value, refused unless it is auto, recall or identity."""
    if name not in ORACLES:
        raise UsageError(f"--oracle {name!r} is not one of {', '.join(ORACLES)}", "pass --oracle auto, recall or identity")
    return name


def initial_choice(requested: str) -> OracleChoice:
    """A forced oracle is known before any request; auto is chosen by the recall probe."""
    if check_oracle(requested) == "auto":
        return OracleChoice("auto", None, NOT_CHOSEN)
    return OracleChoice(requested, requested, f"--oracle {requested}")


def build_probe(corpus: Corpus, seed: str) -> NeedlePrompt:
    """The recall probe: PROBE_TOKENS estimated tokens of filler with one code at PROBE_DEPTH, then the question."""
    codes = make_needle_codes(f"{seed}:recall probe", 1)
    return build_needle_prompt(corpus, PROBE_TOKENS, (PROBE_DEPTH,), codes, start=PROBE_START)


def choose_oracle(probe: NeedlePrompt, answer: Completion) -> OracleChoice:
    """Recall when the probe's answer (under a fresh salt: 0 cached tokens) holds its code, else identity."""
    check_fresh_salt(answer.cached_tokens, "recall probe (fresh salt)")
    if probe.codes[0] in find_codes(answer.text):
        return OracleChoice("auto", "recall", RECALLED)
    return OracleChoice("auto", "identity", NOT_RECALLED)


def probe_data(probe: NeedlePrompt, answer: Completion, choice: OracleChoice) -> dict[str, Any]:
    """What the first step records about the probe."""
    return {"code": probe.codes[0], "prompt_tokens": answer.prompt_tokens, "recalled": choice.used == "recall"}


def oracle_to_dict(choice: OracleChoice) -> dict[str, Any]:
    return {"requested": choice.requested, "used": choice.used, "reason": choice.reason, "text": choice.text}
