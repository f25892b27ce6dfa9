"""An attestation link shows the lock's and the attestation's materials side by side only when the materials are the problem."""

from __future__ import annotations

from kvbake.provenance.core.trace import attestation_link

from message_words import says
from test_trace_links import DIGEST, MATERIALS, statement

OTHER_CONFIG = "sha256:" + "d" * 64


def test_an_attestation_of_another_config_is_broken_by_its_config_even_when_its_materials_differ_too():
    link = attestation_link("alice.pub", DIGEST, "sha256:" + "c" * 64, [statement(config=OTHER_CONFIG, materials=[MATERIALS[0]])], MATERIALS)
    assert (link.kind, link.name, link.value) == ("attestation", "alice.pub", DIGEST) and not link.holds
    assert link.broken.startswith("the attestation by alice.pub: ") and says(link.broken, f"states config {OTHER_CONFIG}")
