"""Adapter: `git apply`, strictly: no git config or repository, check first, no fuzz, no offsets."""

# git reads the normalized patch (diffs.normalized_patch), never the raw file.

from __future__ import annotations

import logging
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kvbake.bake.core.diffs import normalized_patch
from kvbake.errors import PatchError

log = logging.getLogger(__name__)

BASE_ARGS = ("apply", "-v", "-p1", "--whitespace=nowarn")
OFFSET = re.compile(r"Hunk #\d+ succeeded at \d+ \(offset -?\d+ lines?\)")
FUZZ = re.compile(r"with fuzz", re.IGNORECASE)


@dataclass(frozen=True)
class GitResult:
    returncode: int
    output: str  # stdout and stderr, as text
    stdout: bytes = b""  # stdout alone, as git wrote it


def isolated_env(tree: Path) -> dict[str, str]:
    """An environment where git reads no user/system config and finds no enclosing repository."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": str(tree.parent),
        "GIT_CEILING_DIRECTORIES": str(tree.parent.resolve()), "LC_ALL": "C", "LANG": "C",
    })
    return env


def run_git(args: list[str], tree: Path, stdin: bytes | None = None) -> GitResult:
    log.debug("git %s (in the patch tree)", " ".join(args))
    try:
        done = subprocess.run(["git", *args], cwd=tree, env=isolated_env(tree), input=stdin, capture_output=True, check=False)
    except FileNotFoundError:
        raise PatchError("git is not installed", "install it: apt-get install -y git") from None
    return GitResult(done.returncode, (done.stdout + done.stderr).decode("utf-8", "replace"), done.stdout)


def check_strict_output(label: str, output: str) -> None:
    """Offsets, fuzz or skipped sections are fatal even when git reports success."""
    if "Skipped patch" in output:
        raise PatchError(f"{label}: git skipped a section ({_first(output, 'Skipped patch')})", "make every path in the patch match the source tree")
    for pattern, what in ((OFFSET, "an offset"), (FUZZ, "fuzz")):
        match = pattern.search(output)
        if match:
            raise PatchError(f"{label}: applies only with {what} ({match.group(0)})", "regenerate the patch against the pinned base files")


def _first(output: str, needle: str) -> str:
    """The first line holding `needle` (the caller has seen it in `output`)."""
    return next(line.strip() for line in output.splitlines() if needle in line)


def normalized_bytes(patch: Path) -> bytes:
    """The patch as parsed (see diffs.normalized_patch), UTF-8: git applies and identifies exactly what kvbake checked."""
    try:
        text = patch.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise PatchError(f"patch {patch.name} is not UTF-8 text (byte {err.start})", "save the patch as UTF-8") from None
    return normalized_patch(patch.name, text).encode("utf-8")


def can_apply(patch: Path, tree: Path, reverse: bool = False) -> GitResult:
    args = [*BASE_ARGS, "--check", *(["-R"] if reverse else [])]
    return run_git(args, tree, stdin=normalized_bytes(patch))


def apply_strictly(label: str, patch: Path, tree: Path) -> None:
    """Check, then apply; raise PatchError naming why the patch is refused."""
    check = can_apply(patch, tree)
    if check.returncode != 0:
        raise PatchError(f"{label}: does not apply ({_reason(check.output)})", "regenerate the patch against the pinned base files, or fix the chain order")
    check_strict_output(label, check.output)
    applied = run_git(list(BASE_ARGS), tree, stdin=normalized_bytes(patch))
    if applied.returncode != 0:
        raise PatchError(f"{label}: failed while applying ({_reason(applied.output)})", "report this: --check passed but apply failed")
    check_strict_output(label, applied.output)


def _reason(output: str) -> str:
    errors = [line.strip() for line in output.splitlines() if line.startswith("error:") and not line.rstrip().endswith("searching for:")]
    return "; ".join(errors[:2]) or output.strip().splitlines()[-1] if output.strip() else "no output"


def patch_id(patch: Path, tree: Path) -> str:
    """git patch-id --stable of the normalized patch: the same change gives the same id whatever its line numbers,
    file-name prefixes, timestamps or form (git diff, format-patch or plain diff -u)."""
    result = run_git(["patch-id", "--stable"], tree, stdin=normalized_bytes(patch))
    fields = result.output.split()
    if result.returncode != 0 or not fields or not re.fullmatch(r"[0-9a-f]{40}", fields[0]):
        raise PatchError(f"git patch-id gave no id for {patch.name} (it changes no line)", "give the patch at least one changed line")
    return fields[0]


class GitApplier:
    """The chain's Applier backed by git."""

    def apply_strictly(self, label: str, patch: Path, tree: Path) -> None:
        apply_strictly(label, patch, tree)

    def applies_reversed(self, patch: Path, tree: Path) -> bool:
        return can_apply(patch, tree, reverse=True).returncode == 0
