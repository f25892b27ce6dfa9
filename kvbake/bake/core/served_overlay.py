"""The files a serve runs over its image under the source root, the ranks' agreement on them, and the chain's proof."""

from __future__ import annotations

import difflib
import posixpath
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kvbake.digests import sha256_hex
from kvbake.errors import IntegrityError, UsageError

RECORD_FORMAT = 1
SERVED_RECORD_DIR = ".kvbake/served"  # in the project folder: the record init writes and the served bytes
SERVED_RECORD = "record.json"
SERVED_FILES = "files"
DIFFERENCES = "differences.diff"  # beside the record: what lock found different, when it refused
# Where a module's file names a Python package tree: a mounted file or folder of this kind outside the source root
# does not change what the serve imports.
CODE_SUFFIXES = (".py", ".pth", ".so")
PACKAGE_DIRS = ("site-packages", "dist-packages")


@dataclass(frozen=True)
class ServedFile:
    """One file under the source root as a serve runs it: its path relative to the source root, its sha256, the base
    image's sha256 of that path (None: the image has no such file), and how it got there."""

    path: str
    sha256: str
    base_sha256: str | None
    how: str


@dataclass(frozen=True)
class ServedOverlay:
    """Every file a serve runs that differs from its image, read under the source root it imports vllm from."""

    source_root: str
    image_id: str
    files: tuple[ServedFile, ...]
    release: str | None = None  # the kvbake release that serves these files; None: the serve before kvbake (init's record)

    def file(self, path: str) -> ServedFile | None:
        return next((f for f in self.files if f.path == path), None)

    def label(self) -> str:
        """What the proof holds the chain against, as lock and a code-change statement name it."""
        return f"release {self.release}" if self.release else f"the serve before kvbake (image {self.image_id[:19]})"


@dataclass(frozen=True)
class Difference:
    """A file where the chain's result and the served bytes differ: why, and a unified diff (served → chain)."""

    path: str
    why: str
    diff: tuple[str, ...]


@dataclass(frozen=True)
class Proof:
    """The chain's result held against the served overlay: the files proven equal and every difference."""

    equal: tuple[str, ...]
    differences: tuple[Difference, ...]

    def line(self) -> str:
        """The proof line the runbook quotes."""
        if self.differences:
            return (f"the baked image would NOT hold the bytes the serve runs: {len(self.differences)} of "
                    f"{len(self.equal) + len(self.differences)} files differ ({', '.join(d.path for d in self.differences)})")
        return f"the baked image holds the bytes the serve runs: {len(self.equal)} files, sha256 equal"


def under_root(path: str, source_root: str) -> bool:
    root = source_root.rstrip("/")
    return path == root or path.startswith(root + "/")


def relative_to_root(path: str, source_root: str) -> str:
    return posixpath.relpath(path, source_root.rstrip("/"))


def source_root_of(origin: str | None) -> str | None:
    """The folder a serve imports the `vllm` package from (`…/dist-packages` for `…/dist-packages/vllm/__init__.py`)."""
    if not origin or posixpath.basename(posixpath.dirname(origin)) != "vllm":
        return None
    return posixpath.dirname(posixpath.dirname(origin))


def overlay_mounts(container: Mapping[str, Any], source_root: str) -> tuple[tuple[str, str], ...]:
    """(destination, source) of every bind mount at or under the source root, sorted; a mount over a folder above it
    is refused (it replaces the whole package tree, which no chain can state)."""
    found = []
    for mount in container.get("Mounts") or ():
        target = str(mount.get("Destination", ""))
        if mount.get("Type") not in ("bind", "volume", None):
            continue
        if under_root(target, source_root):
            found.append((target, str(mount.get("Source", ""))))
        elif source_root.startswith(target.rstrip("/") + "/"):
            raise UsageError(f"init: {container_name(container)} mounts {target}, a folder above the source root {source_root}: "
                             "it replaces the whole package tree, which no chain can state",
                             "mount only the patched files (or their folders) under the source root, then run init again")
    return tuple(sorted(found))


def misplaced_code_mounts(container: Mapping[str, Any], source_root: str) -> tuple[str, ...]:
    """Mounted Python code that lands in a package tree other than the one the serve imports vllm from: it never runs
    (a `python3.12` overlay on a `python3.11` serve)."""
    misplaced = []
    for mount in container.get("Mounts") or ():
        target = str(mount.get("Destination", ""))
        if under_root(target, source_root) or source_root.startswith(target.rstrip("/") + "/"):
            continue
        parts = target.split("/")
        in_package_tree = any(part in PACKAGE_DIRS for part in parts[:-1]) or "vllm" in parts[:-1]
        if in_package_tree and (target.endswith(CODE_SUFFIXES) or "vllm" in parts):
            misplaced.append(target)
    return tuple(sorted(misplaced))


def container_name(container: Mapping[str, Any]) -> str:
    return str(container.get("Name", "")).lstrip("/") or str(container.get("Id", ""))[:12]


def served_paths(listed: Mapping[str, str]) -> tuple[str, ...]:
    """The files worth holding against the image: every listed path but Python's own bytecode caches."""
    return tuple(sorted(path for path in listed if "__pycache__" not in path.split("/") and not path.endswith(".pyc")))


def served_overlay(source_root: str, image_id: str, served: Mapping[str, tuple[bytes, str]],
                   base: Mapping[str, bytes | None]) -> tuple[ServedOverlay, dict[str, bytes]]:
    """The files that differ from the image (a mounted copy equal to the image's file changes nothing), and their bytes."""
    files, data = [], {}
    for path in sorted(served):
        content, how = served[path]
        before = base.get(path)
        if before is not None and before == content:
            continue
        files.append(ServedFile(path, sha256_hex(content), sha256_hex(before) if before is not None else None, how))
        data[path] = content
    return ServedOverlay(source_root, image_id, tuple(files)), data


def agreed(by_node: Mapping[str, ServedOverlay]) -> ServedOverlay:
    """The overlay every rank serves; ranks that run different bytes (or different files) are refused, named."""
    nodes = list(by_node)
    first = by_node[nodes[0]]
    for node in nodes[1:]:
        other = by_node[node]
        mine = {f.path: f.sha256 for f in first.files}
        theirs = {f.path: f.sha256 for f in other.files}
        differing = sorted(path for path in set(mine) | set(theirs) if mine.get(path) != theirs.get(path))
        if differing:
            shown = "; ".join(f"{path}: {nodes[0]} {short(mine.get(path))}, {node} {short(theirs.get(path))}" for path in differing[:3])
            raise IntegrityError(f"init: the ranks run different files under the source root ({shown})",
                                 "serve the same reviewed overlay on every rank (the seed's mismatched-ranks hazard), then run init again")
    return first


def short(digest: str | None) -> str:
    return digest[:12] if digest else "the image's file"


def prove(served: ServedOverlay, served_bytes: Mapping[str, bytes], chain: Mapping[str, bytes],
          base_sha256: Mapping[str, str | None], base_bytes: Mapping[str, bytes] | None = None) -> Proof:
    """Hold the chain's result (`chain`: every file it touches, after the last patch) against the served overlay: a
    file the serve runs changed must come out of the chain byte for byte (by sha256), and a file the chain changes
    must be one the serve runs changed. `base_sha256` holds the image's hash of each chain file (None: not in the
    image); the bytes (served, the image's) serve only to show a difference."""
    shown = base_bytes or {}
    equal, differences = [], []
    for path in sorted(set(chain) | {f.path for f in served.files}):
        ran = served.file(path)
        if path not in chain:
            differences.append(Difference(path, "the serve runs a changed file the chain does not touch",
                                          unified(path, served_bytes.get(path), shown.get(path))))
        elif ran is not None and sha256_hex(chain[path]) == ran.sha256:
            equal.append(path)
        elif ran is not None:
            differences.append(Difference(path, "the chain's result differs from the served file", unified(path, served_bytes.get(path), chain[path])))
        elif base_sha256.get(path) is None:
            differences.append(Difference(path, "the chain creates a file the serve does not run", unified(path, None, chain[path])))
        elif sha256_hex(chain[path]) == base_sha256[path]:
            equal.append(path)
        else:
            differences.append(Difference(path, "the chain changes a file the serve runs as the image holds it",
                                          unified(path, shown.get(path), chain[path])))
    return Proof(tuple(equal), tuple(differences))


def unified(path: str, served: bytes | None, baked: bytes | None, limit: int = 200) -> tuple[str, ...]:
    """A unified diff from what the serve runs to what the chain bakes (at most `limit` lines)."""
    def lines(data: bytes | None) -> list[str]:
        return [] if data is None else data.decode("utf-8", "backslashreplace").splitlines(keepends=True)
    diff = list(difflib.unified_diff(lines(served), lines(baked), f"served/{path}", f"chain/{path}"))
    text = [line if line.endswith("\n") else line + "\n" for line in diff]
    return tuple(text[:limit] + ([f"... {len(text) - limit} more lines\n"] if len(text) > limit else []))


def differences_text(proof: Proof) -> str:
    """Every difference with its reason and diff, for the file lock names in its refusal."""
    parts = []
    for difference in proof.differences:
        parts.append(f"# {difference.path}: {difference.why}\n" + "".join(difference.diff))
    return "\n".join(parts)


def record_dict(overlay: ServedOverlay, nodes: Sequence[str]) -> dict[str, Any]:
    document = {"format": RECORD_FORMAT, "source_root": overlay.source_root, "image_id": overlay.image_id, "nodes": list(nodes),
                "files": [{"path": f.path, "sha256": f.sha256, "base_sha256": f.base_sha256, "how": f.how} for f in overlay.files]}
    if overlay.release:
        document["release"] = overlay.release
    return document


def record_from_dict(document: Any, source: str) -> ServedOverlay:
    """The served overlay a record holds; anything else is an IntegrityError naming the record."""
    try:
        if document["format"] != RECORD_FORMAT:
            raise ValueError(f"format {document['format']!r}")
        files = tuple(ServedFile(str(f["path"]), str(f["sha256"]), f["base_sha256"], str(f["how"])) for f in document["files"])
        release = document.get("release")
        return ServedOverlay(str(document["source_root"]), str(document["image_id"]), files, str(release) if release else None)
    except (KeyError, TypeError, ValueError) as err:
        raise IntegrityError(f"{source} is not a served-overlay record kvbake wrote ({type(err).__name__}: {err})",
                             "run init again against the serving nodes, or remove the record to bake without the proof") from None
