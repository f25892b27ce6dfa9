"""Adapter: the served-overlay record init wrote, and lock's proof that the chain bakes exactly those bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from kvbake.atomicfile import write_atomic
from kvbake.bake.core.served_overlay import (DIFFERENCES, SERVED_FILES, SERVED_RECORD, SERVED_RECORD_DIR, Proof, ServedOverlay,
                                             differences_text, prove, record_from_dict)
from kvbake.digests import sha256_hex
from kvbake.errors import IntegrityError


def served_folder(project: Path) -> Path:
    return project / SERVED_RECORD_DIR


def read_served(project: Path) -> tuple[ServedOverlay, dict[str, bytes]] | None:
    """The record and the served bytes it names, or None when init wrote none here; a served copy whose bytes no longer
    match the record is refused."""
    record = served_folder(project) / SERVED_RECORD
    if not record.is_file():
        return None
    try:
        document = json.loads(record.read_bytes())
    except (OSError, ValueError) as err:
        raise IntegrityError(f"{SERVED_RECORD_DIR}/{SERVED_RECORD} cannot be read ({type(err).__name__})",
                             "run init again against the serving nodes, or remove the folder to bake without the proof") from None
    overlay = record_from_dict(document, f"{SERVED_RECORD_DIR}/{SERVED_RECORD}")
    data = {}
    for found in overlay.files:
        copy = served_folder(project) / SERVED_FILES / found.path
        content = copy.read_bytes() if copy.is_file() else b""
        if sha256_hex(content) != found.sha256:
            raise IntegrityError(f"{SERVED_RECORD_DIR}/{SERVED_FILES}/{found.path} is not the file the record names (sha256 {found.sha256[:16]}…)",
                                 "run init again against the serving nodes to read the served files anew")
        data[found.path] = content
    return overlay, data


def served_proof(project: Path, source_root: str, chain: Mapping[str, bytes], base_sha256: Mapping[str, str | None],
                 base_bytes: Mapping[str, bytes] | None = None) -> Proof | None:
    """The proof against the record in `project` (None without one, or when the serve ran its image unchanged)."""
    read = read_served(project)
    if read is None or not read[0].files:
        return None
    overlay, data = read
    if overlay.source_root != source_root:
        raise IntegrityError(f"the serve's files were read under {overlay.source_root}, but the manifest's base.source_root is {source_root}",
                             "run init again against the serving nodes (it writes the source root the serve imports vllm from)")
    return prove(overlay, data, chain, base_sha256, base_bytes)


def require_served_proof(project: Path, source_root: str, chain: Mapping[str, bytes], base_sha256: Mapping[str, str | None],
                         base_bytes: Mapping[str, bytes]) -> Proof | None:
    """The proof, or an IntegrityError naming every differing file, their diffs written to a file beside the record."""
    proof = served_proof(project, source_root, chain, base_sha256, base_bytes)
    report = served_folder(project) / DIFFERENCES
    if proof is None or not proof.differences:
        report.unlink(missing_ok=True)
        return proof
    write_atomic(report, differences_text(proof).encode("utf-8"))
    raise IntegrityError(f"lock: {proof.line()}; each diff is in {SERVED_RECORD_DIR}/{DIFFERENCES}",
                         "bake the served bytes instead (init --capture), or fix the chain or the mounted overlay so both agree, "
                         "then run lock again")
