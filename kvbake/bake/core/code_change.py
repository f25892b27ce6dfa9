"""A code change the operator states once (reason and diffs kept beside the manifest), and a release as a baseline."""

# The chain bakes other bytes than the proof's baseline serves: lock --code-change says why, once, and the statement
# (code-changes/<chain>.diff) covers that chain against that baseline only.

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from kvbake.bake.core.served_overlay import Proof, ServedFile, ServedOverlay, differences_text
from kvbake.digests import sha256_hex

STATEMENTS_DIR = "code-changes"  # in the project folder, beside manifest.yaml: kept (and reviewed) with the release
HEADER = "# kvbake code change"
FIELDS = ("reason", "chain", "against", "baseline", "files")


@dataclass(frozen=True)
class Statement:
    """The operator's word that the chain (its overlay tree) may differ from the baseline, and why."""

    reason: str
    chain: str  # the overlay tree sha256 of the lock it was stated for
    against: str  # the baseline's label (ServedOverlay.label)
    baseline: str  # baseline_sha256 of the files it was held against
    files: tuple[str, ...]

    def covers(self, chain: str, baseline: ServedOverlay, proof: Proof) -> bool:
        """Whether this statement covers exactly this chain's differences from this very baseline (its files' bytes)."""
        return (self.chain, self.against, self.baseline, self.files) == (
            chain, baseline.label(), baseline_sha256(baseline), tuple(d.path for d in proof.differences))


def baseline_sha256(baseline: ServedOverlay) -> str:
    """One hash of every file the baseline serves changed (path and sha256)."""
    return sha256_hex("".join(f"{f.path}\0{f.sha256}\n" for f in sorted(baseline.files, key=lambda f: f.path)).encode())


def statement_name(chain: str) -> str:
    """The statement's file name: one per chain (overlay tree)."""
    return f"{chain[:16]}.diff"


def statement_text(statement: Statement, proof: Proof) -> str:
    """The statement file: its fields as comment lines, then every difference with its reason and diff."""
    head = [HEADER, f"# reason: {statement.reason}", f"# chain: {statement.chain}", f"# against: {statement.against}",
            f"# baseline: {statement.baseline}", f"# files: {', '.join(statement.files)}"]
    return "\n".join(head) + "\n\n" + differences_text(proof)


def parse_statement(text: str) -> Statement | None:
    """The statement a file holds, or None when it is not one kvbake wrote (its header lines are read, nothing else)."""
    lines = text.splitlines()
    if not lines or lines[0] != HEADER:
        return None
    found = {}
    for line in lines[1:1 + len(FIELDS)]:
        name, sep, value = line.removeprefix("# ").partition(": ")
        if sep:
            found[name] = value
    if set(found) != set(FIELDS) or not found["reason"].strip():
        return None
    files = tuple(path for path in found["files"].split(", ") if path)
    return Statement(found["reason"], found["chain"], found["against"], found["baseline"], files)


def check_reason(reason: str) -> str | None:
    """Why a stated reason cannot be kept on one header line, or None."""
    if not reason.strip():
        return "it is empty"
    if "\n" in reason or "\r" in reason:
        return "it spans lines"
    return None


def release_baseline(source_root: str, image_id: str, release: str | None, chain: Mapping[str, bytes],
                     base_sha256: Mapping[str, str | None]) -> ServedOverlay:
    """What a release of a chain serves over its base: every file of the chain that differs from the base's."""
    how = f"baked by release {release}" if release else "baked by the chain"
    files = tuple(ServedFile(path, sha256_hex(data), base_sha256.get(path), how)
                  for path, data in sorted(chain.items()) if sha256_hex(data) != base_sha256.get(path))
    return ServedOverlay(source_root, image_id, files, release)
