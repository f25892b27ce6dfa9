"""Adapter: the length a server's `/v1/models` says it serves (vLLM's `max_model_len`): a drafter's, or the serve's own."""

from __future__ import annotations

from typing import Any

import httpx

TIMEOUT_S = 5.0


def first_length(models: Any) -> int | None:
    """The first positive integer `max_model_len` a models list gives, or None."""
    lengths = [model.get("max_model_len") for model in models if isinstance(model, dict)] if isinstance(models, list) else []
    known = [length for length in lengths if isinstance(length, int) and not isinstance(length, bool) and length > 0]
    return known[0] if known else None


def served_positions(url: str) -> int | None:
    """The drafter's `max_model_len` from `GET URL/v1/models`, or None when it does not answer or does not say."""
    try:
        reply = httpx.get(url.rstrip("/") + "/v1/models", timeout=TIMEOUT_S)
        reply.raise_for_status()
        models = reply.json().get("data") or []
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return first_length(models)


def serve_length(base_url: str, api_key: str | None) -> tuple[int | None, str]:
    """(the serve's `max_model_len` from `GET URL/v1/models`, with its API key when one is given; "") or (None, why not:
    its status, the error that stopped the request, or that it named no length). Proxies are not used: the serve is on
    the operator's own network."""
    url = base_url.rstrip("/") + "/v1/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        reply = httpx.get(url, timeout=TIMEOUT_S, headers=headers, trust_env=False)
    except httpx.HTTPError as err:
        return None, f"{url} did not answer ({type(err).__name__})"
    if reply.status_code != 200:
        return None, f"{url} answered HTTP {reply.status_code}"
    try:
        length = first_length(reply.json().get("data"))
    except (ValueError, AttributeError):
        length = None
    return (length, "") if length else (None, f"{url} names no max_model_len")
