"""The switch names a rebase moves: names read on the new base and not the old, declared ones no longer read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kvbake.bake.core.env_reads import is_switch_name, scan_source


def names_read(files: Mapping[str, bytes | None]) -> set[str]:
    """Every environment name the files read (in vLLM's envs.py, the registry's entries are registrations, not reads)."""
    found: set[str] = set()
    for path, data in files.items():
        if data is not None:
            found |= {n for n in scan_source(path, data.decode("utf-8", "replace")) if is_switch_name(n)}
    return found


def switch_changes(old: Mapping[str, bytes | None], new: Mapping[str, bytes | None],
                   declared: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(names read on the new base that were not read before, declared switches the new files no longer read)."""
    before, after = names_read(old), names_read(new)
    return tuple(sorted(after - before)), tuple(sorted(n for n in declared if n in before and n not in after))
