"""Adapter: how many positions a remote drafter serves, as its own OpenAI-compatible `/v1/models` says (vLLM's `max_model_len`)."""

from __future__ import annotations

import httpx

TIMEOUT_S = 5.0


def served_positions(url: str) -> int | None:
    """The drafter's `max_model_len` from `GET URL/v1/models`, or None when it does not answer or does not say."""
    try:
        reply = httpx.get(url.rstrip("/") + "/v1/models", timeout=TIMEOUT_S)
        reply.raise_for_status()
        models = reply.json().get("data") or []
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    lengths = [model.get("max_model_len") for model in models if isinstance(model, dict)]
    known = [length for length in lengths if isinstance(length, int) and not isinstance(length, bool) and length > 0]
    return known[0] if known else None
