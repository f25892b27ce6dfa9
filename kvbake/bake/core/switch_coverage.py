"""Switch coverage: the manifest declares every environment variable the chain introduces, and the chain reads every switch."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Protocol, Sequence

from kvbake.bake.core.env_reads import ENVS_PATH, READS, REGISTERS, Where, registered_names, scan_added_lines, scan_source
from kvbake.errors import ManifestError

if TYPE_CHECKING:
    from kvbake.bake.core.diffs import FileChange

UNREGISTERED = "vLLM warns about unregistered VLLM_* variables at boot and refuses to start with fail_on_environ_validation"
FIX = ("declare every name the chain reads under switches (off by default) or forbidden, "
       "and remove or rename every switch no code reads")


class Declares(Protocol):
    """What the check needs from a manifest: the declared and the forbidden names."""

    @property
    def switches(self) -> Mapping[str, object]: ...

    @property
    def forbidden(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class CoverageReport:
    """The verdict: errors (fatal), warnings, the names the chain introduces, and the base names it reads."""

    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    reads: Mapping[str, tuple[Where, ...]] = field(default_factory=dict)
    base_names: tuple[str, ...] = ()
    registry: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors


def _text(data: bytes | str) -> str:
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


def introduced_names(patches_changes: Mapping[str, Sequence[FileChange]], envs_path: str = ENVS_PATH) -> dict[str, tuple[Where, ...]]:
    """Every name the chain's added lines read or register, with each place, in chain order."""
    merged: dict[str, list[Where]] = {}
    for patch_id, changes in patches_changes.items():
        for name, places in scan_added_lines(patch_id, changes, envs_path).items():
            merged.setdefault(name, []).extend(places)
    return {name: tuple(dict.fromkeys(places)) for name, places in sorted(merged.items())}


def base_lines(patches_changes: Mapping[str, Sequence[FileChange]], overlay: Mapping[str, str]) -> dict[str, list[str]]:
    """Per patched file, the lines no patch added: each line of the result is a base line or an added one."""
    added: dict[str, Counter[str]] = {}
    for changes in patches_changes.values():
        for change in changes:
            added.setdefault(change.path, Counter()).update(line.rstrip("\r\n") for line in change.added_lines)
    return {path: list((Counter(text.splitlines()) - added.get(path, Counter())).elements()) for path, text in overlay.items()}


def names_in_base(candidates: Iterable[str], lines: Mapping[str, list[str]], base_registry: set[str]) -> set[str]:
    """Candidates the base code already names (a base line of a patched file, or the base's registry)."""
    text = "\n".join(line for kept in lines.values() for line in kept)
    return {n for n in candidates if n in base_registry or re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text)}


def _registry(overlay: Mapping[str, str], introduced: Mapping[str, tuple[Where, ...]], base_envs_text: str | None,
              envs_path: str) -> tuple[set[str] | None, set[str], str]:
    """Registered names (None when unknown), the base's own registrations, and where they were read from."""
    added = {n for n, places in introduced.items() if any(w.how == REGISTERS for w in places)}
    if envs_path in overlay:
        everything = registered_names(overlay[envs_path])
        base = everything - added if base_envs_text is None else registered_names(base_envs_text)
        return everything, base, f"patched {envs_path}"
    if base_envs_text is not None:
        base = registered_names(base_envs_text)
        return base | added, base, f"base {envs_path}"
    return None, set(), "unchecked"


def _where_text(places: Iterable[Where]) -> str:
    return ", ".join(f"patch {w.patch_id} {w.path}{' (registry)' if w.how == REGISTERS else ''}" for w in places)


def _undeclared_errors(introduced: Mapping[str, tuple[Where, ...]], declared: Declares, ignored: set[str]) -> list[str]:
    errors = []
    for name, places in introduced.items():
        if name in ignored or name in declared.switches or name in declared.forbidden:
            continue
        verb = "read" if any(w.how == READS for w in places) else "registered"
        errors.append(f"{name} is {verb} by the code but not declared as a switch or forbidden ({_where_text(places)})")
    return errors


def _dead_errors(declared: Declares, used: set[str]) -> list[str]:
    return [f"switch {name} is a dead switch: declared in the manifest but no code of the chain reads it"
            for name in sorted(declared.switches) if name not in used]


def _unregistered_fix(names: Sequence[str], envs_path: str) -> str:
    return f"{UNREGISTERED}; register {'it' if len(names) == 1 else 'them'} in {envs_path}, or never start with that option"


def _registry_warnings(declared: Declares, registry: set[str] | None, envs_path: str) -> list[str]:
    """At most one warning, naming every declared VLLM_* switch the registry lacks (and their count)."""
    vllm = [name for name in sorted(declared.switches) if name.startswith("VLLM_")]
    if registry is None:
        return [f"the vLLM registry could not be checked (the chain does not touch {envs_path} and no copy of it was given): "
                f"{', '.join(vllm)} may be unregistered, and {_unregistered_fix(vllm, envs_path)}"] if vllm else []
    missing = [name for name in vllm if name not in registry]
    if len(missing) == 1:
        return [f"switch {missing[0]} is not registered in {envs_path}: {_unregistered_fix(missing, envs_path)}"]
    return [f"{len(missing)} switches are not registered in {envs_path} ({', '.join(missing)}): "
            f"{_unregistered_fix(missing, envs_path)}"] if missing else []


def check_coverage(manifest: Declares, patches_changes: Mapping[str, Sequence[FileChange]], overlay_tree: Mapping[str, bytes | str],
                   base_envs_text: str | None = None, envs_path: str = ENVS_PATH) -> CoverageReport:
    """Compare what the chain reads with what the manifest declares; pure, over parsed patches and patched files."""
    overlay = {path: _text(data) for path, data in overlay_tree.items()}
    introduced = introduced_names(patches_changes, envs_path)
    registry, base_registry, source = _registry(overlay, introduced, base_envs_text, envs_path)
    ignored = names_in_base(introduced, base_lines(patches_changes, overlay), base_registry)
    used = {n for n, places in introduced.items() if any(w.how == READS for w in places)}
    for path, text in overlay.items():
        used |= scan_source(path, text, envs_path)
    errors = _undeclared_errors(introduced, manifest, ignored) + _dead_errors(manifest, used)
    reads = {n: places for n, places in introduced.items() if n not in ignored}
    return CoverageReport(tuple(errors), tuple(_registry_warnings(manifest, registry, envs_path)), reads, tuple(sorted(ignored)), source)


def raise_for_coverage(report: CoverageReport) -> None:
    """Raise one ManifestError (exit 3) that names every coverage error on one line; warnings never raise."""
    if report.errors:
        raise ManifestError(f"switch coverage: {len(report.errors)} problem(s): {'; '.join(report.errors)}", FIX)


def summary_lines(report: CoverageReport) -> list[str]:
    """Readable lines: each introduced name and where, the ignored base names, then warnings and errors."""
    lines = [f"{name}: {_where_text(places)}" for name, places in report.reads.items()]
    if report.base_names:
        lines.append(f"already in the base (ignored): {', '.join(report.base_names)}")
    lines.append(f"registry: {report.registry}")
    lines += [f"warning: {w}" for w in report.warnings] + [f"error: {e}" for e in report.errors]
    return lines
