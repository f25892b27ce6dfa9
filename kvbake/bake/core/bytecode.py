"""Offline bytecode proof: from pyc headers and what sits beside a module, show that only its patched source can run."""

from __future__ import annotations

import importlib.util
import struct
from dataclasses import dataclass, field
from typing import Mapping

PYC_HEADER = 16
FLAG_HASH_BASED = 0b01
FLAG_CHECK_SOURCE = 0b10
ARCH_TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "arm": "arm-linux-gnueabihf",
                 "ppc64le": "powerpc64le-linux-gnu", "s390x": "s390x-linux-gnu", "386": "i386-linux-gnu"}


@dataclass(frozen=True)
class ModuleEvidence:
    """What the image holds for one patched module: its source as baked, and every file that could be run instead."""

    path: str
    source: bytes
    source_mtime: int
    pyc_headers: Mapping[str, bytes] = field(default_factory=dict)
    shadows: tuple[str, ...] = ()


def shadow_candidates(module: str, python_tags: tuple[str, ...], architecture: str) -> tuple[str, ...]:
    """Paths that Python's path finder would take before `pkg/mod.py`: a package `pkg/mod/`, or an extension module."""
    stem = module.removesuffix(".py")  # a relative path (lock and patch paths are), so its folders stay as they are
    triplet = ARCH_TRIPLETS.get(architecture, f"{architecture}-linux-gnu")
    candidates = [f"{stem}/__init__.py", f"{stem}.so", f"{stem}.abi3.so"]
    candidates += [f"{stem}.{tag}-{triplet}.so" for tag in python_tags]
    return tuple(candidates)


def pyc_verdict(header: bytes, source: bytes, source_mtime: int) -> str | None:
    """None when Python would reject this cached file for the given source (so the source runs); else why it could win."""
    if len(header) < PYC_HEADER:
        return None  # a truncated pyc is rejected by the loader
    flags = struct.unpack("<I", header[4:8])[0]
    if flags & FLAG_HASH_BASED:
        if not flags & FLAG_CHECK_SOURCE:
            return "an unchecked-hash pyc, which Python runs without looking at the source"
        if header[:4] != importlib.util.MAGIC_NUMBER:
            return "a checked-hash pyc of another Python version, which cannot be checked offline"
        return "a checked-hash pyc that matches the patched source" if header[8:16] == importlib.util.source_hash(source) else None
    mtime, size = struct.unpack("<II", header[8:16])
    if (mtime, size) == (source_mtime & 0xFFFFFFFF, len(source) & 0xFFFFFFFF):
        return "a timestamp pyc whose mtime and size equal the patched source's, so Python trusts it"
    return None


def module_failures(evidence: ModuleEvidence) -> list[str]:
    """Every way something other than the patched source could run for this module."""
    failures = [f"{evidence.path}: {shadow} exists and is imported before the patched source" for shadow in evidence.shadows]
    for name, header in sorted(evidence.pyc_headers.items()):
        verdict = pyc_verdict(header, evidence.source, evidence.source_mtime)
        if verdict is not None:
            failures.append(f"{evidence.path}: {name} is {verdict}")
    return failures


def python_tags(stale_bytecode: tuple[str, ...]) -> tuple[str, ...]:
    """The interpreter tags (cpython-311, …) that the base's cached bytecode names, for the extension-module names."""
    tags = {name.rsplit("/", 1)[-1].split(".")[1] for name in stale_bytecode if name.count(".") >= 2}
    return tuple(sorted(tag for tag in tags if tag.startswith(("cpython-", "pypy"))))
