"""Which signing options each cosign generation gets, read from its own help: the old signature format for cosign 3."""

from __future__ import annotations

from pathlib import Path

from kvbake.attest.adapters import cosign


def fake_cosign(folder: Path, help_text: str) -> str:
    program = folder / "cosign"
    program.write_text(f"#!/bin/sh\ncat <<'HELP'\n{help_text}\nHELP\n")
    program.chmod(0o755)
    return str(program)


def test_cosign_3_keeps_the_signature_format_cosign_2_reads_and_cosign_2_needs_only_no_tlog(tmp_path: Path) -> None:
    three = tmp_path / "three"
    two = tmp_path / "two"
    three.mkdir()
    two.mkdir()
    newer = fake_cosign(three, "    --use-signing-config=true:\n    --tlog-upload=true:")
    older = fake_cosign(two, "    --tlog-upload=true:")
    assert cosign.offline_options(newer, "sign") == ("--new-bundle-format=false", "--use-signing-config=false", "--tlog-upload=false")
    assert cosign.offline_options(older, "attest") == ("--tlog-upload=false",)
