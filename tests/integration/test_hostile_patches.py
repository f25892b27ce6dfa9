"""Hostile patches on the real engine: a symlink to a secret outside the tree is refused before anything is applied or
written, and a plain `diff -u` chain locks to the same files and patch ids as its git form."""

from __future__ import annotations

import difflib
import json
import tempfile
from pathlib import Path

import pytest

from kvbake.engines.adapters.client import Engine

from conftest import leftover_containers, run, tags_of
from tiny import MOD_V1, MOD_V2, MOD_V3, NEW

pytestmark = pytest.mark.docker
REPO = "127.0.0.1:5000/tiny"
SECRET = '{"auths": {"127.0.0.1:5000": {"auth": "c2VjcmV0OnBhc3N3b3Jk"}}}\n'


def symlink_patch(target: Path) -> str:
    return (f"diff --git a/pkg/creds.py b/pkg/creds.py\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
            f"+++ b/pkg/creds.py\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n")


def snapshot(manifest: Path) -> tuple[bytes, dict[str, bytes]]:
    overlay = manifest.with_name("overlay")
    return manifest.with_name("manifest.lock.json").read_bytes(), {
        str(p.relative_to(overlay)): p.read_bytes() for p in sorted(overlay.rglob("*")) if p.is_file()}


def refused(capsys, engine: Engine, manifest: Path, command: str) -> str:
    """The command fails with exit 5 and one line; no tag, container, temp file, lock or overlay change is left."""
    tags, before = tags_of(engine, REPO), snapshot(manifest)
    code, _, err = run(capsys, command, "--manifest", str(manifest))
    assert code == 5, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "fix:" in lines[0], err
    assert tags_of(engine, REPO) == tags and leftover_containers(engine) == []
    assert list(Path(tempfile.gettempdir()).iterdir()) == []
    assert snapshot(manifest) == before
    return lines[0]


@pytest.mark.parametrize("command", ["lock", "build"])
def test_a_symlink_to_a_secret_outside_the_tree_is_refused(capsys, engine, tiny, tmp_path, command):
    secret = tmp_path / "registry-credentials.json"
    secret.write_text(SECRET)
    patch = tiny.with_name("patches") / "0002-new-module.patch"
    patch.write_text(patch.read_text() + symlink_patch(secret))
    line = refused(capsys, engine, tiny, command)
    assert "patch 0002 creates pkg/creds.py as a symlink (new file mode 120000)" in line
    assert not any(b"c2VjcmV0" in data for data in snapshot(tiny)[1].values())


def plain(path: str, old: str | None, new: str) -> str:
    """`diff -ruN vllm.orig vllm` output for one file (an epoch timestamp marks a created file)."""
    before = "1970-01-01 00:00:00.000000000 +0000" if old is None else "2024-05-01 10:00:00.000000000 +0000"
    lines = difflib.unified_diff((old or "").splitlines(keepends=True), new.splitlines(keepends=True),
                                 f"vllm.orig/{path}\t{before}", f"vllm/{path}\t2024-05-02 10:00:00.000000000 +0000")
    return f"diff -ruN vllm.orig/{path} vllm/{path}\n" + "".join(lines)


def test_a_plain_diff_u_chain_locks_like_its_git_form(capsys, engine, tiny):
    git_lock = json.loads(tiny.with_name("manifest.lock.json").read_text())
    patches = tiny.with_name("patches")
    (patches / "0001-switch.patch").write_text(plain("pkg/mod.py", MOD_V1, MOD_V2))
    (patches / "0002-new-module.patch").write_text(plain("pkg/mod.py", MOD_V2, MOD_V3) + plain("pkg/new.py", None, NEW))
    code, _, err = run(capsys, "lock", "--manifest", str(tiny))
    assert code == 0, err
    plain_lock = json.loads(tiny.with_name("manifest.lock.json").read_text())
    assert [p["patch_id"] for p in plain_lock["patches"]] == [p["patch_id"] for p in git_lock["patches"]]
    assert [p["files"] for p in plain_lock["patches"]] == [p["files"] for p in git_lock["patches"]]
    assert plain_lock["files"] == git_lock["files"] and plain_lock["overlay_tree_sha256"] == git_lock["overlay_tree_sha256"]
    assert [p["sha256"] for p in plain_lock["patches"]] != [p["sha256"] for p in git_lock["patches"]]
