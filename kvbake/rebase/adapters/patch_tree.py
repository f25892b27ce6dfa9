"""Adapter: git in isolated scratch folders: apply with rejects, apply one hunk, merge one file three ways, diff."""

from __future__ import annotations

import tempfile
from pathlib import Path

from kvbake.bake.adapters.gitapply import BASE_ARGS, OFFSET, run_git
from kvbake.errors import PatchError
from kvbake.rebase.core.apply_report import HunkApplied, read_apply_report

Files = dict[str, bytes | None]  # path below the source root -> content, None when absent


def write_tree(root: Path, files: Files) -> None:
    for path, data in files.items():
        target = root / path
        if data is None:
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def read_tree(root: Path, paths) -> Files:
    return {path: (root / path).read_bytes() if (root / path).is_file() else None for path in paths}


def apply_with_rejects(patch: bytes, files: Files) -> tuple[Files, dict[tuple[str, int], HunkApplied]]:
    """`git apply -v --reject` of a normalized patch onto these files: what they become (the hunks that apply, without
    fuzz) and each hunk's outcome."""
    with tempfile.TemporaryDirectory(prefix="kvbake-rebase-") as scratch:
        tree = Path(scratch) / "tree"
        tree.mkdir()
        write_tree(tree, files)
        done = run_git([*BASE_ARGS, "--reject"], tree, stdin=patch)
        outcomes = read_apply_report(done.output)
        if done.returncode != 0 and not outcomes:
            raise PatchError(f"git apply could not read the patch ({done.output.strip().splitlines()[-1:]})",
                             "report this with the patch: kvbake checked it before")
        return read_tree(tree, files), outcomes


def apply_exactly(patch: bytes, files: Files) -> Files:
    """Apply a patch that must apply as stated (a hunk on the very file it was written against)."""
    with tempfile.TemporaryDirectory(prefix="kvbake-rebase-") as scratch:
        tree = Path(scratch) / "tree"
        tree.mkdir()
        write_tree(tree, files)
        done = run_git(list(BASE_ARGS), tree, stdin=patch)
        if done.returncode != 0 or OFFSET.search(done.output):
            raise PatchError(f"a hunk no longer applies to the file it was locked against ({done.output.strip()[-200:]})",
                             "run python build.py lock, then rebase again")
        return read_tree(tree, files)


def merge_three(current: bytes, base: bytes, other: bytes) -> tuple[bytes, int]:
    """`git merge-file` of the new base's file (current), the old base's (base) and the old patched one (other): the
    merged bytes, with conflict markers where both sides changed the same lines, and the number of conflicts."""
    with tempfile.TemporaryDirectory(prefix="kvbake-merge-") as scratch:
        folder = Path(scratch)
        for name, data in (("new-base", current), ("old-base", base), ("old-patched", other)):
            (folder / name).write_bytes(data)
        done = run_git(["merge-file", "-p", "-L", "new base", "-L", "old base", "-L", "old patched",
                        "new-base", "old-base", "old-patched"], folder)
        if done.returncode < 0 or done.returncode > 127:
            raise PatchError(f"git merge-file failed ({done.output[-200:]!r})", "report this with the files")
        return done.stdout, done.returncode


def diff_body(before: Files, after: Files, order: list[str]) -> str:
    """The git diff from `before` to `after`, one section per path in `order` (a/ b/ names, as git apply reads them)."""
    with tempfile.TemporaryDirectory(prefix="kvbake-diff-") as scratch:
        tree = Path(scratch) / "tree"
        tree.mkdir()
        run_git(["init", "-q"], tree)
        write_tree(tree, before)
        run_git(["add", "-A"], tree)
        write_tree(tree, after)
        body = []
        for path in order:
            if before.get(path) is None:
                run_git(["add", "-N", "--", path], tree)
            done = run_git(["diff", "--no-color", "--no-ext-diff", "-U3", "--", path], tree)
            body.append(done.stdout.decode("utf-8"))
        return "".join(body)


def reverse_exactly(patch: bytes, files: Files) -> Files:
    """Take a patch back out of the files it was applied to (they must hold exactly its result)."""
    with tempfile.TemporaryDirectory(prefix="kvbake-rebase-") as scratch:
        tree = Path(scratch) / "tree"
        tree.mkdir()
        write_tree(tree, files)
        done = run_git([*BASE_ARGS, "-R"], tree, stdin=patch)
        if done.returncode != 0 or OFFSET.search(done.output):
            raise PatchError(f"the chain does not come back out of overlay/ ({done.output.strip()[-200:]})",
                             "run python build.py lock to rewrite overlay/, then rebase again")
        return read_tree(tree, files)
