"""Pure: the chain of evidence from donor commit to running rank, link by link, each checked against what was found."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from kvbake.lock import Lock
from kvbake.attest.core.admission import attestation_problem, material_text, signature_problem, signed_digests, subject_digests

# the kinds of link, in the order the chain runs
KINDS = ("donor", "patch", "file", "layer", "config", "manifest", "signature", "attestation", "rank")
PUSHED_MANIFEST = "pushed manifest digest"  # the link whose value, once it holds, is the digest signatures must sign


@dataclass(frozen=True)
class Link:
    """One link: what it is, the value it carries, and, when broken, the two sources and values that disagree."""

    kind: str
    name: str
    value: str
    broken: str | None = None

    @property
    def holds(self) -> bool:
        return self.broken is None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "value": self.value, "holds": self.holds, "broken": self.broken}


def checked(kind: str, name: str, claimed_by: str, claimed: str | None, found_by: str, found: str | None) -> Link:
    """A link whose value `claimed_by` records and `found_by` finds again; broken, naming both values, when they differ
    or when either is missing."""
    if claimed is not None and claimed == found:
        return Link(kind, name, claimed)
    broken = f"{claimed_by} says {claimed or 'nothing'}, {found_by} {'finds ' + found if found else 'finds nothing'}"
    return Link(kind, name, claimed or found or "", broken)


def donor_link(lock: Lock, manifest_url: str, manifest_revision: str) -> Link:
    claimed = f"{lock.donor_url}@{lock.donor_revision}"
    return checked("donor", "commit", "the lock", claimed, "manifest.yaml", f"{manifest_url}@{manifest_revision}")


def patch_links(lock: Lock, found: Mapping[str, tuple[str, str] | None]) -> list[Link]:
    """Per locked patch: its sha256 and git patch-id against the file in patches/ (`found[id]`: (sha256, patch-id),
    None when the file is missing)."""
    links = []
    for patch in lock.patches:
        here = found.get(patch.id)
        claimed = f"sha256 {patch.sha256}, patch-id {patch.patch_id}"
        again = None if here is None else f"sha256 {here[0]}, patch-id {here[1]}"
        links.append(checked("patch", patch.id, "the lock", claimed, patch.file, again))
    return links


def file_links(lock: Lock, overlay: Mapping[str, str | None], recovered_base: Mapping[str, str | None]) -> list[Link]:
    """Per locked file: the overlay/ file's sha256 (after the chain), and the base file the chain taken back out of it
    recovers (before the chain; none for a file the chain creates)."""
    links = []
    for locked in lock.files:
        claimed = f"base {locked.base_sha256 or 'none'} → after {locked.overlay_sha256}"
        base_again = recovered_base.get(locked.path, "missing") if locked.base_sha256 is not None else None
        after_again = overlay.get(locked.path)
        found = None if after_again is None or base_again == "missing" else f"base {base_again or 'none'} → after {after_again}"
        links.append(checked("file", locked.path, "the lock", claimed, "overlay/ and the chain taken back out", found))
    return links


def image_links(lock: Lock, planned_diff_id: str | None, planned_config: str | None) -> list[Link]:
    """The thin layer and the image config, rebuilt from overlay/ in memory, against the lock's derived section."""
    return [checked("layer", "thin layer diff_id", "the lock", lock.derived.layer_diff_id, "the layer rebuilt from overlay/", planned_diff_id),
            checked("config", "image config digest", "the lock", lock.derived.image_id, "the config assembled again", planned_config)]


def recorded_digest(pinned: str | None) -> str | None:
    """The digest a digest reference pins: everything after its first @ (None without one)."""
    return pinned.split("@", 1)[1] if pinned and "@" in pinned else None


def manifest_links(lock: Lock, pinned: str | None, served_digest: str | None, served_config: str | None) -> list[Link]:
    """The pushed manifest: the push record's digest against the registry's answer, and the config it names against
    the lock's."""
    return [checked("manifest", PUSHED_MANIFEST, "the push record", recorded_digest(pinned), "the registry", served_digest),
            checked("manifest", "config the registry's manifest names", "the lock", lock.derived.image_id, "the registry's manifest", served_config)]


def rank_links(node_failures: Mapping[str, Sequence[str]], identity: str) -> list[Link]:
    """Per node: the running container's identity and switch set, broken with verify-running's findings."""
    return [Link("rank", node, identity, "; ".join(failures) or None) for node, failures in sorted(node_failures.items())]


def first_broken(links: Sequence[Link]) -> Link | None:
    return next((link for link in links if not link.holds), None)


LONG_HEX = re.compile(r"\b([0-9a-f]{12})[0-9a-f]{28,}\b")


def short(value: str) -> str:
    """Hashes cut to their first 12 hex digits, for the table (the JSON and the broken-link texts keep them whole)."""
    return LONG_HEX.sub(r"\1…", value)


def table(links: Sequence[Link]) -> str:
    """One line per link: kind, name, value (hashes shortened), and `ok` or `BROKEN: …` with both values whole."""
    rows = [(link.kind, link.name, short(link.value), "ok" if link.holds else f"BROKEN: {link.broken}") for link in links]
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(2)]
    return "\n".join(f"{kind:<{widths[0]}}  {name:<{widths[1]}}  {value}  {state}" for kind, name, value, state in rows)


def signature_link(key: str, digest: str, verified: Sequence[Mapping[str, Any]] | str) -> Link:
    """cosign's verified signature payloads for one key must sign exactly `digest` (deploy's own check,
    `signature_problem`); a text is cosign's refusal."""
    if isinstance(verified, str):
        return Link("signature", key, digest, f"cosign refuses the signature with {key}: {verified}")
    if signature_problem(verified, digest) is None:
        return Link("signature", key, digest)
    return checked("signature", key, "the registry", digest, f"the signature by {key}", ", ".join(signed_digests(verified)) or None)


def attestation_link(key: str, digest: str, config_digest: str, statements: Sequence[Mapping[str, Any]] | str,
                     materials: Sequence[Mapping[str, Any]]) -> Link:
    """The verified in-toto statements for one key, judged by deploy's own check (`attestation_problem`): every statement
    naming `digest` as its subject must be SLSA provenance that states the release's config digest and holds exactly the
    lock's materials (the base, every patch, the donor commit), whatever the statements' order. A text is cosign's
    refusal, or why its output holds no statement."""
    if isinstance(statements, str):
        return Link("attestation", key, digest, f"cosign refuses the attestation with {key}: {statements}")
    problem = attestation_problem(statements, digest, config_digest, materials)
    if problem is None:
        return Link("attestation", key, f"{digest} ({len(materials)} materials)")
    differing = [found for statement in statements if digest in subject_digests(statement)
                 and material_text(found := list((statement.get("predicate") or {}).get("materials") or [])) != material_text(materials)]
    if differing and problem.startswith("the attestation's materials"):  # shown beside the lock's
        link = checked("attestation", key, "the lock", material_text(materials), f"the attestation by {key}", material_text(differing[0]))
        return replace(link, value=f"{digest} ({len(materials)} materials)")
    return Link("attestation", key, digest, f"the attestation by {key}: {problem}")
