"""doctor's memory and disk probe: the free bytes come from its last line, and an unreadable probe says what to check."""

from __future__ import annotations

import pytest
from message_words import says
from test_doctor_registry_line import STANDIN, ProbeEngine

from kvbake.errors import RolloutError
from kvbake.manifest import load_manifest
from kvbake.operate.adapters import doctor
from kvbake.operate.adapters.memwatch import GIB


def memory_and_disk(output: str) -> str:
    return doctor.node_memory_and_disk_line(ProbeEngine("c", output), "n", load_manifest(STANDIN), GIB, GIB)


def test_the_free_bytes_are_read_from_the_probes_last_line_only() -> None:
    line = memory_and_disk(f"MemAvailable:   {4 * GIB // 1024} kB\nAvail\n{30 * GIB}\n")
    assert says(line, "30.00 GiB free")


def test_an_unreadable_probe_tells_to_check_the_base_images_tools() -> None:
    with pytest.raises(RolloutError) as caught:
        memory_and_disk("no meminfo\n123\n")
    assert says(caught.value.fix, "base image") and says(caught.value.fix, "sh, grep and df")


def test_an_unreadable_probe_quotes_at_most_80_characters_of_its_output() -> None:
    output = "x" * 100
    with pytest.raises(RolloutError) as caught:
        memory_and_disk(output)
    assert repr(output[:80]) in caught.value.message and repr(output[:81]) not in caught.value.message
