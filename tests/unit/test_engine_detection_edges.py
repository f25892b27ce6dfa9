"""The engine's server version read at its edges: a leading `v`, blanks and suffixes, and the fix for an unreadable one."""

from __future__ import annotations

import pytest

from kvbake.engines.core.detection import parse_version
from kvbake.errors import EngineError

from message_words import says


@pytest.mark.parametrize(("text", "version"), [("v26.1.5", (26, 1)), ("  27.0.3+dfsg1", (27, 0)), ("20.10.24", (20, 10))])
def test_the_major_and_minor_are_read_past_a_leading_v_blanks_and_suffixes(text, version):
    assert parse_version(text) == version


@pytest.mark.parametrize("text", ["", None, "dev", "V26.1"])
def test_an_unreadable_version_is_refused_with_the_check_to_run(text):
    with pytest.raises(EngineError) as caught:
        parse_version(text)
    assert caught.value.exit_code == 8 and says(caught.value.message, "unreadable server version")
    assert says(caught.value.fix, "docker version")
