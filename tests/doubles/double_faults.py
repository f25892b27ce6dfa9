"""Faults the OpenAI test double injects: server-wide switches and targeted faults for chosen requests.

A targeted `Fault` has one effect and a selector. The selector picks requests of one kind ("completion",
"tokenize" or "models") and, optionally, the k-th request of that kind (1-based, in arrival order), the requests
whose cache_salt ends with a given text, the prompts of a given length (the double's own token count), the
prompts that contain a given text, or the completions the double answered in a batch with others (or alone; see
`Misbehaviour.batch`). Every condition given must hold. A fault hits every request it selects, for as long as it
is set.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KINDS = ("completion", "tokenize", "models")
# effect -> (the type of its value, or None when it takes none; the kinds it applies to)
EFFECTS: dict[str, tuple[type | None, tuple[str, ...]]] = {
    "status": (int, KINDS),  # answer with this HTTP status and an error body
    "invalid_json": (None, KINDS),  # answer 200 with a body that is not JSON
    "delay": (float, KINDS),  # wait this many seconds first; set it above the client's timeout
    "cached_tokens": (int, ("completion",)),  # report this cached count
    "prompt_tokens": (int, ("completion",)),  # report this many more (negative: fewer) prompt tokens
    "drop_details": (None, ("completion",)),  # leave usage.prompt_tokens_details out
    "code": (str, ("completion",)),  # answer with this code in place of the prompt's last code (cannot_recall: alone)
    "truncate": (None, ("completion",)),  # answer with the first half of the answer
    "empty": (None, ("completion", "models")),  # answer with no text / list no model
    "drop_tokens": (None, ("tokenize",)),  # leave the tokens list out
}


@dataclass(frozen=True)
class Fault:
    """One effect for the requests its selector picks; invalid combinations raise ValueError."""

    effect: str
    value: int | float | str | None = None
    kind: str = "completion"
    request: int | None = None  # the k-th request of this kind, 1-based; None: every one
    salt_suffix: str | None = None  # only requests whose cache_salt ends with this
    prompt_tokens: int | None = None  # only prompts of exactly this many tokens (the double's count)
    prompt_contains: str | None = None  # only prompts that contain this text
    batched: bool | None = None  # only completions answered in a batch with others (True) or alone (False)

    def __post_init__(self) -> None:
        if not isinstance(self.effect, str) or not isinstance(self.kind, str) or self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.effect not in EFFECTS or self.kind not in EFFECTS[self.effect][1]:
            usable = sorted(name for name, (_, kinds) in EFFECTS.items() if self.kind in kinds)
            raise ValueError(f"effect {self.effect!r} does not apply to {self.kind} requests; use one of {usable}")
        wanted = EFFECTS[self.effect][0]
        if wanted is None and self.value is not None:
            raise ValueError(f"effect {self.effect!r} takes no value")
        if wanted is not None and not _is_a(self.value, wanted):
            raise ValueError(f"effect {self.effect!r} needs a value of type {wanted.__name__}")
        if self.request is not None and (not _is_a(self.request, int) or self.request < 1):
            raise ValueError(f"request {self.request!r} must be a request number from 1")
        if self.salt_suffix is not None and not isinstance(self.salt_suffix, str):
            raise ValueError(f"salt_suffix {self.salt_suffix!r} must be a text")
        if self.prompt_tokens is not None and not _is_a(self.prompt_tokens, int):
            raise ValueError(f"prompt_tokens {self.prompt_tokens!r} must be a token count")
        if self.prompt_contains is not None and (not isinstance(self.prompt_contains, str) or not self.prompt_contains):
            raise ValueError(f"prompt_contains {self.prompt_contains!r} must be a non-empty text")
        if self.batched is not None and (not isinstance(self.batched, bool) or self.kind != "completion"):
            raise ValueError(f"batched {self.batched!r} must be true or false, and only for completions")

    def selects(self, kind: str, number: int, salt: str | None, prompt_tokens: int | None, prompt: str | None = None,
                batched: bool = False) -> bool:
        """True when this fault applies to the number-th request of this kind."""
        return (kind == self.kind and self.request in (None, number)
                and (self.salt_suffix is None or (salt or "").endswith(self.salt_suffix))
                and self.prompt_tokens in (None, prompt_tokens)
                and (self.prompt_contains is None or self.prompt_contains in (prompt or ""))
                and self.batched in (None, batched))


def _is_a(value: Any, wanted: type) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, float)) if wanted is float else isinstance(value, wanted)


def fault_from_json(body: Any) -> Fault:
    """A Fault from a JSON object with the field names of Fault; anything else raises ValueError."""
    names = {field.name for field in dataclasses.fields(Fault)}
    if not isinstance(body, Mapping) or not set(body) <= names or "effect" not in body:
        raise ValueError(f"a fault is an object with 'effect' and fields among {sorted(names)}")
    return Fault(**body)


@dataclass(frozen=True)
class Misbehaviour:
    """Faults the double injects; the default is a correct server."""

    foreign_code: str | None = None  # appended to every answer
    cached_tokens_offset: int = 0  # added to every reported cached count
    ignore_salt: bool = False  # cache hits leak across salts
    fail_status: int | None = None  # completions and tokenize answer with this HTTP status
    omit_last_code: bool = False  # the last needle code is left out of answers
    corrupt_hits: bool = False  # a request with cached tokens answers differently
    cannot_recall: bool = False  # answers never hold a needle code: a digest of the prompt, as a model that cannot recall
    batch: int = 0  # hold each completion until this many are held (a batch) or none arrives for batch_wait_s (alone)
    batch_wait_s: float = 0.2
    batch_salt: str | None = None  # hold only completions whose cache_salt this regular expression finds (None: all)
    faults: tuple[Fault, ...] = ()  # targeted faults, see Fault

    def holds(self, salt: str | None) -> bool:
        """Whether the batch gate holds a completion under this salt (a request it does not hold is alone)."""
        return self.batch > 0 and (self.batch_salt is None or re.search(self.batch_salt, salt or "") is not None)

    def selected(self, kind: str, number: int, salt: str | None = None, prompt_tokens: int | None = None,
                 prompt: str | None = None, batched: bool = False) -> dict[str, Any]:
        """The effects that hit this request, by name (the last fault wins for an effect set twice)."""
        return {f.effect: f.value for f in self.faults if f.selects(kind, number, salt, prompt_tokens, prompt, batched)}


def misbehaviour_update(current: Misbehaviour, body: Any) -> Misbehaviour:
    """Replace the named fields of `current` from a /control/misbehave body; ValueError on anything unknown."""
    names = {field.name for field in dataclasses.fields(Misbehaviour)}
    if not isinstance(body, Mapping) or not set(body) <= names:
        raise ValueError(f"fields must be among {sorted(names)}")
    changes = dict(body)
    if "faults" in changes:
        if not isinstance(changes["faults"], Sequence) or isinstance(changes["faults"], str):
            raise ValueError("faults must be a list of fault objects")
        changes["faults"] = tuple(fault_from_json(item) for item in changes["faults"])
    return dataclasses.replace(current, **changes)


def misbehaviour_json(faults: Misbehaviour) -> dict[str, Any]:
    """The JSON form of the current faults, as /control/misbehave answers it."""
    return dataclasses.asdict(faults)


class BatchGate:
    """Holds completions the way a batching scheduler groups them, so that "in a batch" is deterministic.

    A completion waits until `size` completions are held at once (they are released together: a batch) or until
    `wait_s` passes without another arrival (it is released alone). Requests sent together arrive well within
    `wait_s` of each other, so they form batches; a request sent alone always waits `wait_s` and is alone.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held = 0
        self._arrivals = 0
        self._batches = 0

    def hold(self, size: int, wait_s: float) -> bool:
        """Wait as described; True when released in a batch of `size` (> 1) completions."""
        with self._cond:
            self._held += 1
            self._arrivals += 1
            batch = self._batches
            if self._held >= size:
                self._held, self._batches = 0, batch + 1
            self._cond.notify_all()
            if self._batches != batch:
                return size > 1
            while self._batches == batch:
                seen = self._arrivals
                if not self._cond.wait_for(lambda: self._batches != batch or self._arrivals != seen, timeout=wait_s):
                    self._held -= 1
                    return False
            return True
