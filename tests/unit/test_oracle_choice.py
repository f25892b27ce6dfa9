"""The auto oracle's choice from the recall probe's answer: who asked for it, and which oracle it chose."""

from __future__ import annotations

from kvbake.operate.core.completions import Completion
from kvbake.operate.core.oracle import build_probe, choose_oracle
from kvbake.operate.core.validate_plan import synthetic_corpus


def test_an_answer_without_the_probes_code_chooses_identity_for_auto() -> None:
    probe = build_probe(synthetic_corpus(), "kvbake")
    choice = choose_oracle(probe, Completion("no code here", 400, 0))
    assert (choice.requested, choice.used) == ("auto", "identity")
    recalled = choose_oracle(probe, Completion(probe.codes[0], 400, 0))
    assert (recalled.requested, recalled.used) == ("auto", "recall")


def test_the_probe_starts_at_its_own_record_not_the_first() -> None:
    corpus = synthetic_corpus()
    probe = build_probe(corpus, "kvbake")
    assert not probe.text.startswith(corpus.documents[0].text[:40])
    assert probe.text.startswith(corpus.documents[5].text[:40])
