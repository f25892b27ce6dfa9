"""The rebase report: each touched file's state, each patch and hunk's outcome, as Markdown and as JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbake.rebase.core.upstream import UpstreamOverlap

# A hunk's outcome, mildest first; a patch takes its worst hunk's.
CLEAN, OFFSET, MERGED, CONFLICT = "clean", "offset", "merged", "conflict"
ORDER = (CLEAN, OFFSET, MERGED, CONFLICT)
UNCHANGED, CHANGED, GONE, ABSENT, APPEARED = "unchanged", "changed", "gone", "absent", "appeared"


@dataclass(frozen=True)
class FileState:
    """A file the chain touches: its hash on the lock's base and on the new base, and what that makes it."""

    path: str
    change: str
    before: str | None
    now: str | None

    @property
    def state(self) -> str:
        if self.change == "create":
            return ABSENT if self.now is None else APPEARED
        if self.now is None:
            return GONE
        return UNCHANGED if self.now == self.before else CHANGED


@dataclass(frozen=True)
class HunkReport:
    """One hunk: where the patch states it, how it fares on the new base, and the upstream change it meets."""

    path: str
    number: int
    header: str
    status: str
    offset: int = 0
    line: int | None = None
    upstream: UpstreamOverlap | None = None
    reason: str = ""


@dataclass(frozen=True)
class PatchedFile:
    """A file of a refreshed patch: its hash before and after the patch on the new base (None: absent or conflicted)."""

    path: str
    before: str | None
    after: str | None


@dataclass(frozen=True)
class PatchReport:
    id: str
    file: str
    hunks: tuple[HunkReport, ...]
    files: tuple[PatchedFile, ...] = field(default=())

    @property
    def status(self) -> str:
        return max((hunk.status for hunk in self.hunks), key=ORDER.index, default=CLEAN)


@dataclass(frozen=True)
class RebaseReport:
    """Everything `rebase` found, from the lock's base to the target."""

    manifest: str
    from_image: str
    from_config: str
    to_image: str
    to_config: str
    files: tuple[FileState, ...]
    patches: tuple[PatchReport, ...]
    new_switches: tuple[str, ...] = ()
    unread_switches: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        statuses = [hunk.status for patch in self.patches for hunk in patch.hunks]
        return {status: statuses.count(status) for status in ORDER}

    @property
    def needs_person(self) -> tuple[str, ...]:
        return tuple(patch.id for patch in self.patches if patch.status == CONFLICT)


def report_json(report: RebaseReport) -> dict[str, Any]:
    return {
        "manifest": report.manifest,
        "from": {"image": report.from_image, "config_digest": report.from_config},
        "to": {"image": report.to_image, "config_digest": report.to_config},
        "files": [{"path": f.path, "change": f.change, "state": f.state, "before": f.before, "now": f.now} for f in report.files],
        "patches": [patch_json(patch) for patch in report.patches],
        "counts": report.counts(),
        "needs_person": list(report.needs_person),
        "new_switches": list(report.new_switches),
        "unread_switches": list(report.unread_switches),
    }


def patch_json(patch: PatchReport) -> dict[str, Any]:
    return {"id": patch.id, "file": patch.file, "status": patch.status,
            "files": [{"path": f.path, "before": f.before, "after": f.after} for f in patch.files],
            "hunks": [hunk_json(hunk) for hunk in patch.hunks]}


def hunk_json(hunk: HunkReport) -> dict[str, Any]:
    found: dict[str, Any] = {"path": hunk.path, "number": hunk.number, "header": hunk.header, "status": hunk.status}
    if hunk.status == OFFSET:
        found.update({"offset": hunk.offset, "line": hunk.line})
    if hunk.reason:
        found["reason"] = hunk.reason
    if hunk.upstream is not None:
        found["upstream"] = {"diff": hunk.upstream.as_diff(), "conflicting_lines": list(hunk.upstream.conflicting_lines)}
    return found


def report_markdown(report: RebaseReport) -> str:
    counts = report.counts()
    out = [f"# Rebase of {report.manifest}", "",
           f"- from `{report.from_image}` (config `{report.from_config}`)",
           f"- to `{report.to_image}` (config `{report.to_config}`)",
           f"- hunks: {counts[CLEAN]} clean, {counts[OFFSET]} offset, {counts[MERGED]} merged, {counts[CONFLICT]} conflicted",
           f"- needs a person: {', '.join(report.needs_person) or 'none'}", "",
           "## Files on the new base", "", "| file | change | state |", "|---|---|---|"]
    out += [f"| `{f.path}` | {f.change} | {f.state} |" for f in report.files]
    if report.new_switches:
        out += ["", f"Environment names the chain's files read on the new base and did not before (review them; `lock` "
                f"refuses one the chain's own lines read without a declaration): {', '.join(f'`{n}`' for n in report.new_switches)}"]
    if report.unread_switches:
        out += ["", f"Declared switches the chain's files no longer read on the new base (`lock` refuses a declared switch "
                f"nothing reads): "
                f"{', '.join(f'`{n}`' for n in report.unread_switches)}"]
    for patch in report.patches:
        out += ["", f"## {patch.id}: {patch.status}", "", f"`{patch.file}`", "", "| file | hunk | status | detail |", "|---|---:|---|---|"]
        out += [f"| `{h.path}` | {h.number} | {h.status} | {hunk_detail(h)} |" for h in patch.hunks]
        for hunk in patch.hunks:
            if hunk.upstream is not None and hunk.upstream.regions:
                lines = ", ".join(str(n) for n in hunk.upstream.conflicting_lines)
                out += ["", f"Hunk {hunk.number} of `{hunk.path}` (`{hunk.header}`) meets this upstream change"
                        f"{f' (its old lines {lines})' if lines else ''}:", "", "```diff", hunk.upstream.as_diff().rstrip("\n"), "```"]
    return "\n".join(out) + "\n"


def hunk_detail(hunk: HunkReport) -> str:
    if hunk.status == OFFSET:
        return f"at line {hunk.line} ({hunk.offset:+d} lines)"
    return hunk.reason
