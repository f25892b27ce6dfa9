"""Print the Debian mirror URL the machine's own apt sources name (KVBAKE_DEBIAN_MIRROR overrides); fail in one line."""

# The first `deb` entry of a Debian suite (a codename, optionally -updates, -backports or -proposed-updates, never
# -security; a release name such as `stable` only at a URI whose path ends in /debian, since vendors' repositories use
# it too) with the `main` component, in apt's order: sources.list, then the files of
# sources.list.d in name order, each in the one-line format (*.list) or deb822 (*.sources, `Enabled: no` skipped).
# Standard library only: install_engines.sh and debian13_chroot.sh run it before anything else is installed.

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

OVERRIDE = "KVBAKE_DEBIAN_MIRROR"
CODENAMES = ("jessie", "stretch", "buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid")
RELEASES = ("oldoldstable", "oldstable", "stable", "testing", "unstable")
SUFFIXES = "(?:-updates|-backports|-proposed-updates)?"
CODENAME_SUITE = re.compile(rf"^(?:{'|'.join(CODENAMES)}){SUFFIXES}$")
RELEASE_SUITE = re.compile(rf"^(?:{'|'.join(RELEASES)}){SUFFIXES}$")
SCHEMES = ("http://", "https://", "ftp://", "file:")


@dataclass(frozen=True)
class Entry:
    """One source: its types (deb, deb-src), URIs, suites and components."""

    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]


def one_line_entries(text: str) -> list[Entry]:
    """The entries of a sources.list file: `deb [options] URI SUITE COMPONENT…`, comments skipped."""
    entries = []
    for line in text.splitlines():
        line = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0])
        words = line.split()
        if len(words) >= 3 and words[0] in ("deb", "deb-src"):
            entries.append(Entry((words[0],), (words[1],), (words[2],), tuple(words[3:])))
    return entries


def deb822_fields(stanza: list[str]) -> dict[str, str]:
    """A stanza's fields, folded continuation lines joined, comment lines skipped."""
    fields: dict[str, str] = {}
    name = None
    for line in stanza:
        if line.startswith("#"):
            continue
        if line[:1] in (" ", "\t") and name is not None:
            fields[name] += " " + line.strip()
        elif ":" in line:
            name, value = (part.strip() for part in line.split(":", 1))
            name = name.lower()
            fields[name] = value
    return fields


def deb822_entries(text: str) -> list[Entry]:
    """The entries of a *.sources file: stanzas of Types, URIs, Suites and Components, separated by blank lines."""
    stanzas: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip():
            stanzas[-1].append(line)
        elif stanzas[-1]:
            stanzas.append([])
    entries = []
    for stanza in stanzas:
        fields = deb822_fields(stanza)
        if fields.get("enabled", "yes").lower() == "no":
            continue
        entries.append(Entry(*(tuple(fields.get(key, "").split()) for key in ("types", "uris", "suites", "components"))))
    return entries


def is_debian_archive(uri: str, suite: str) -> bool:
    return bool(CODENAME_SUITE.match(suite) or (RELEASE_SUITE.match(suite) and uri.rstrip("/").endswith("/debian")))


def first_archive(entries: list[Entry]) -> str | None:
    """The first URI of a binary Debian archive entry (never a security suite), without a trailing slash."""
    for entry in entries:
        if "deb" not in entry.types or "main" not in entry.components:
            continue
        for uri in entry.uris:
            if uri.startswith(SCHEMES) and any(is_debian_archive(uri, suite) for suite in entry.suites):
                return uri.rstrip("/")
    return None


def source_files(root: Path) -> list[Path]:
    """The files apt reads, in its order."""
    apt = root / "etc" / "apt"
    parts = apt / "sources.list.d"
    found = [apt / "sources.list"] if (apt / "sources.list").is_file() else []
    if parts.is_dir():
        found += sorted(p for p in parts.iterdir() if p.is_file() and p.suffix in (".list", ".sources"))
    return found


def mirror(root: Path) -> str | None:
    """The first Debian archive URI of the apt sources under `root`, or None."""
    for path in source_files(root):
        text = path.read_text(encoding="utf-8", errors="replace")
        found = first_archive(deb822_entries(text) if path.suffix == ".sources" else one_line_entries(text))
        if found:
            return found
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, default=Path("/"), help="the root whose etc/apt is read (default /)")
    args = parser.parse_args(argv)
    found = os.environ.get(OVERRIDE) or mirror(args.root)
    if not found:
        print(f"debian_mirror: no Debian archive in the apt sources of {args.root} (etc/apt/sources.list, sources.list.d); "
              f"set {OVERRIDE} to the URL of a Debian mirror", file=sys.stderr)
        return 1
    print(found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
