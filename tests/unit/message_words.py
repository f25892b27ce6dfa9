"""`says`: a message names a phrase as whole words, so a test asserts what a refusal tells, never its whole text."""

from __future__ import annotations

import re


def says(text: str | None, phrase: str) -> bool:
    """True when `phrase` stands in `text` with no letter or digit glued to either end."""
    return text is not None and re.search(rf"(?<![A-Za-z0-9]){re.escape(phrase)}(?![A-Za-z0-9])", text) is not None
