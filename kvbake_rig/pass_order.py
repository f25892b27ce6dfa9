"""The order of a test pass: modules marked runs_first before every other, those marked runs_last after every other."""

from __future__ import annotations

from typing import Any

# The real-Ray walks hold the machine-wide fixed-ports lock; the containerd store's pass runs its walks first and the
# classic store's pass runs its walks last, so the two passes, which start together, seldom wait for each other's
# ports (tests/conftest.py sorts every pass by pass_rank).
PASS_ORDER = {"runs_first": 0, "runs_last": 2}


def pass_rank(item: Any) -> int:
    """0 for a test of a runs_first module, 2 for one of a runs_last module, 1 for every other (pytest's order kept)."""
    return min((PASS_ORDER[mark.name] for mark in item.iter_markers() if mark.name in PASS_ORDER), default=1)
