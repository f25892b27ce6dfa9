"""Adapter: the proof's baseline (init's serve, then each release deployed here), lock's proof, code-change statements."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from kvbake.atomicfile import write_atomic
from kvbake.bake.core.code_change import (STATEMENTS_DIR, Statement, baseline_sha256, check_reason, parse_statement, release_baseline, statement_name,
                                         statement_text)
from kvbake.bake.core.served_overlay import (DIFFERENCES, SERVED_FILES, SERVED_RECORD, SERVED_RECORD_DIR, Proof, ServedOverlay,
                                             differences_text, prove, record_dict, record_from_dict)
from kvbake.digests import sha256_hex
from kvbake.errors import IntegrityError, UsageError

BASELINES_DIR = ".kvbake/baselines"  # every baseline the proof had, by key: `adopted` (init's record), a release's id
BEFORE_KVBAKE = "adopted"


def served_folder(project: Path) -> Path:
    return project / SERVED_RECORD_DIR


def read_served(project: Path) -> tuple[ServedOverlay, dict[str, bytes]] | None:
    """The record and the served bytes it names, or None when init wrote none here; a served copy whose bytes no longer
    match the record is refused."""
    return read_record(served_folder(project))


def read_record(folder: Path) -> tuple[ServedOverlay, dict[str, bytes]] | None:
    """A record folder's overlay and bytes (None without a record); a copy whose bytes differ from the record is refused."""
    record = folder / SERVED_RECORD
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
        copy = folder / SERVED_FILES / found.path
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


@dataclass(frozen=True)
class ProofOutcome:
    """lock's proof: None without a baseline; the statement that covers its differences (already kept, or to write
    once the lock is written)."""

    proof: Proof | None
    statement: Statement | None = None
    to_write: str | None = None  # the statement file's text, written beside the manifest after the lock


def require_served_proof(project: Path, source_root: str, chain: Mapping[str, bytes], base_sha256: Mapping[str, str | None],
                         base_bytes: Mapping[str, bytes], chain_tree: str = "", code_change: str | None = None) -> ProofOutcome:
    """The proof; differences pass only under a statement of the code change (kept from an earlier lock of this very
    chain, or made now from `code_change`); else an IntegrityError naming every differing file, their diffs written to
    a file beside the record."""
    if code_change is not None and (why := check_reason(code_change)):
        raise UsageError(f"lock --code-change: the reason {why}", 'give one line that says why, e.g. --code-change "packing v2 from the donor"')
    proof = served_proof(project, source_root, chain, base_sha256, base_bytes)
    report = served_folder(project) / DIFFERENCES
    if proof is None or not proof.differences:
        report.unlink(missing_ok=True)
        return ProofOutcome(proof)
    baseline = read_served(project)
    assert baseline is not None
    kept = kept_statement(project, chain_tree)
    if kept is not None and kept.covers(chain_tree, baseline[0], proof):
        report.unlink(missing_ok=True)
        return ProofOutcome(proof, kept)
    if code_change is not None:
        statement = Statement(code_change, chain_tree, baseline[0].label(), baseline_sha256(baseline[0]), tuple(d.path for d in proof.differences))
        report.unlink(missing_ok=True)
        return ProofOutcome(proof, statement, statement_text(statement, proof))
    write_atomic(report, differences_text(proof).encode("utf-8"))
    raise IntegrityError(f"lock: {proof.line()}, held against {baseline[0].label()}; each diff is in {SERVED_RECORD_DIR}/{DIFFERENCES}",
                         "bake the served bytes instead (init --capture), or fix the chain or the mounted overlay so both agree, "
                         'or, when the chain is meant to change that code, say so once: lock --code-change "why", then run lock again')


def statement_path(project: Path, chain_tree: str) -> Path:
    return project / STATEMENTS_DIR / statement_name(chain_tree)


def kept_statement(project: Path, chain_tree: str) -> Statement | None:
    """The statement kept for this chain beside the manifest, or None."""
    path = statement_path(project, chain_tree)
    try:
        return parse_statement(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def write_statement(project: Path, outcome: ProofOutcome) -> Path | None:
    """Keep a new statement beside the manifest (after the lock it covers was written); its path, or None."""
    if outcome.to_write is None or outcome.statement is None:
        return None
    path = statement_path(project, outcome.statement.chain)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, outcome.to_write.encode("utf-8"))
    return path


def write_record_folder(final: Path, overlay: ServedOverlay, data: Mapping[str, bytes], nodes: Sequence[str]) -> Path:
    """A record and its bytes in `final`, replaced whole (written beside it, then renamed over it)."""
    fresh = final.with_name(final.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    for path, content in data.items():
        (fresh / SERVED_FILES / path).parent.mkdir(parents=True, exist_ok=True)
        (fresh / SERVED_FILES / path).write_bytes(content)
    fresh.mkdir(parents=True, exist_ok=True)
    write_atomic(fresh / SERVED_RECORD, (json.dumps(record_dict(overlay, nodes), indent=1, sort_keys=True) + "\n").encode())
    shutil.rmtree(final, ignore_errors=True)
    fresh.rename(final)
    return final / SERVED_RECORD


def write_served(project: Path, overlay: ServedOverlay, data: Mapping[str, bytes], nodes: Sequence[str]) -> Path:
    """The proof's baseline under `.kvbake/served/`, replaced whole."""
    return write_record_folder(served_folder(project), overlay, data, nodes)


def baseline_folder(project: Path, key: str) -> Path:
    return project / BASELINES_DIR / key


def move_baseline(project: Path, overlay: ServedOverlay, data: Mapping[str, bytes], nodes: Sequence[str]) -> bool:
    """A release deployed from this project becomes the proof's baseline: later chains are held against what it serves.
    The serve init read is kept as `adopted` the first time, each release under its id. False without a baseline
    (a project init did not read a serve for keeps no proof)."""
    current = read_served(project)
    if current is None or overlay.release is None:
        return False
    if current[0].release is None and not (baseline_folder(project, BEFORE_KVBAKE) / SERVED_RECORD).is_file():
        write_record_folder(baseline_folder(project, BEFORE_KVBAKE), current[0], current[1], nodes)
    write_record_folder(baseline_folder(project, overlay.release), overlay, data, nodes)
    write_served(project, overlay, data, nodes)
    return True


def restore_baseline(project: Path, key: str, nodes: Sequence[str]) -> ServedOverlay | None:
    """After a rollback: the baseline kept under `key` (`adopted`, or the release rolled back to) is the proof's again;
    None when none is kept here (that release was deployed from elsewhere: the baseline stays)."""
    kept = read_record(baseline_folder(project, key))
    if kept is None or read_served(project) is None:
        return None
    write_served(project, kept[0], kept[1], nodes)
    return kept[0]


def chain_key(chain_tree: str) -> str:
    return f"chain-{chain_tree[:16]}"


def stage_chain(project: Path, source_root: str, image_id: str, chain_tree: str, chain: Mapping[str, bytes],
                base_sha256: Mapping[str, str | None]) -> bool:
    """After a lock of a project that keeps a proof: the chain's files, ready to become the baseline when a release of
    it is deployed (deploy reads no overlay/). False when the project keeps no proof."""
    if read_served(project) is None:
        return False
    overlay = release_baseline(source_root, image_id, None, chain, base_sha256)
    write_record_folder(baseline_folder(project, chain_key(chain_tree)), overlay, {f.path: chain[f.path] for f in overlay.files}, [])
    return True


def release_becomes_baseline(project: Path, chain_tree: str, release: str, nodes: Sequence[str]) -> ServedOverlay | None:
    """After a deploy from this project: the release's files (its chain, as lock staged them) are the proof's baseline.
    None when the project keeps no proof or its lock staged no files here (a lock made on another host)."""
    staged = read_record(baseline_folder(project, chain_key(chain_tree)))
    if staged is None:
        return None
    overlay = replace(staged[0], release=release, files=tuple(replace(f, how=f"baked by release {release}") for f in staged[0].files))
    return overlay if move_baseline(project, overlay, staged[1], nodes) else None
