"""The proof's lifecycle: a chain that bakes other code than the baseline serves passes only under the operator's
statement (said once, kept with every diff in code-changes/), and a release deployed from the project becomes the
baseline later chains are held against, until a rollback puts the one it returns to back."""

from __future__ import annotations

import shutil

import pytest

from kvbake.bake.adapters.pinning import create_lock
from kvbake.bake.adapters.served_proof import (BEFORE_KVBAKE, read_served, release_becomes_baseline, restore_baseline,
                                               statement_path)
from kvbake.bake.commands import cmd_lock
from kvbake.bake.core.code_change import Statement, parse_statement, statement_text
from kvbake.bake.core.served_overlay import Proof
from kvbake.cli import parse_args
from kvbake.errors import IntegrityError, UsageError
from kvbake.manifest import load_manifest
from tests.unit.bake_project import HELPER, MODULE, PATCHED, creation, engine_with_base, modification, project
from tests.unit.test_served_overlay import write_record

EDITED = MODULE + "# edited on the node\n"  # the serve runs a local mod the chain does not make
PATCHED_V2 = PATCHED.replace("return 1", "return 2")  # the donor's next revision
PATCH_V2 = modification("pkg/mod.py", MODULE, PATCHED_V2) + creation("pkg/helper.py", HELPER)


@pytest.fixture(autouse=True)
def fixed_epoch(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")


def lock(manifest, monkeypatch, *options: str):
    engine = engine_with_base()
    monkeypatch.setattr("kvbake.bake.commands.Engine", lambda host: engine)
    return cmd_lock(parse_args(["lock", "--manifest", str(manifest.path), *options], "build.py"))


def test_a_chain_that_differs_from_the_served_mod_is_refused_until_stated_once_and_the_diff_is_kept(tmp_path, monkeypatch):
    manifest = project(tmp_path)
    write_record(manifest.root, {"pkg/mod.py": EDITED.encode(), "pkg/helper.py": HELPER.encode()})
    with pytest.raises(IntegrityError) as refused:
        lock(manifest, monkeypatch)
    assert 'lock --code-change "why"' in refused.value.fix and not manifest.lock_path.exists()
    assert not (manifest.root / "code-changes").exists()

    data, text = lock(manifest, monkeypatch, "--code-change", "the reviewed chain replaces the node's local mod")
    locked = load_manifest(manifest.path)
    kept = statement_path(manifest.root, data_tree(locked))
    assert kept.is_file() and data["served_proof"]["code_change"] == {
        "reason": "the reviewed chain replaces the node's local mod", "file": f"code-changes/{kept.name}",
        "against": "the serve before kvbake (image sha256:i)"}
    line = next(line for line in text.splitlines() if line.startswith("proof: a stated code change"))
    assert "1 of 2 files differ from the serve before kvbake (image sha256:i) (pkg/mod.py)" in line and f"code-changes/{kept.name}" in line
    statement = kept.read_text()
    assert "# reason: the reviewed chain replaces the node's local mod" in statement and "-# edited on the node\n" in statement
    assert not (manifest.root / ".kvbake" / "served" / "differences.diff").exists()

    again, text = lock(manifest, monkeypatch)  # said once: the same chain against the same baseline needs no second word
    assert again["served_proof"]["code_change"]["reason"] == "the reviewed chain replaces the node's local mod"


def data_tree(manifest) -> str:
    from kvbake.lock import load_lock_file

    return load_lock_file(manifest.lock_path).overlay_tree_sha256


def test_a_statement_covers_only_its_own_chain_and_baseline(tmp_path, monkeypatch):
    manifest = project(tmp_path)
    write_record(manifest.root, {"pkg/mod.py": EDITED.encode(), "pkg/helper.py": HELPER.encode()})
    lock(manifest, monkeypatch, "--code-change", "replace the mod")
    write_record(manifest.root, {"pkg/mod.py": (EDITED + "# and again\n").encode(), "pkg/helper.py": HELPER.encode()})
    kept = statement_path(manifest.root, data_tree(manifest)).read_text()
    with pytest.raises(IntegrityError):  # the same chain, but the baseline's files changed: the old word does not cover it
        lock(manifest, monkeypatch)
    assert statement_path(manifest.root, data_tree(manifest)).read_text() == kept


@pytest.mark.parametrize("reason", ["", "  ", "two\nlines"])
def test_a_reason_that_is_empty_or_spans_lines_is_refused_and_nothing_is_written(tmp_path, monkeypatch, reason):
    manifest = project(tmp_path)
    write_record(manifest.root, {"pkg/mod.py": EDITED.encode(), "pkg/helper.py": HELPER.encode()})
    with pytest.raises(UsageError) as refused:
        lock(manifest, monkeypatch, "--code-change", reason)
    assert refused.value.message.startswith("lock --code-change: the reason ") and not manifest.lock_path.exists()
    assert not (manifest.root / "code-changes").exists()


def test_a_statement_reads_back_and_anything_else_is_none():
    statement = Statement("why", "a" * 64, "release 0123", "b" * 64, ("pkg/a.py", "pkg/b.py"))
    assert parse_statement(statement_text(statement, Proof((), ()))) == statement
    assert parse_statement("# kvbake code change\n# reason: \n# chain: x\n# against: y\n# baseline: b\n# files: z\n") is None
    assert parse_statement("diff --git a/x b/x\n") is None and parse_statement("") is None


def deployed(manifest, release: str) -> None:
    moved = release_becomes_baseline(manifest.root, data_tree(manifest), release, ["a", "b"])
    assert moved is not None and moved.release == release and {f.path for f in moved.files} == {"pkg/mod.py", "pkg/helper.py"}


def next_revision(manifest, tmp_path):
    """The same project with the donor's next revision of the patch: its folder, its records kept."""
    newer = project(tmp_path / "v2", PATCH_V2)
    shutil.copytree(manifest.root / ".kvbake", newer.root / ".kvbake")
    return newer


def test_after_a_deploy_the_next_donor_revision_is_held_against_the_release_and_a_rollback_moves_the_baseline_back(tmp_path, monkeypatch):
    manifest = project(tmp_path)
    write_record(manifest.root, {"pkg/mod.py": PATCHED.encode(), "pkg/helper.py": HELPER.encode()})
    lock(manifest, monkeypatch)
    deployed(manifest, "1111222233334444")
    assert read_served(manifest.root)[0].label() == "release 1111222233334444"
    data, text = lock(manifest, monkeypatch)  # the same chain: the release's own bytes, proven
    assert data["served_proof"]["against"] == "release 1111222233334444" and not data["served_proof"]["differences"]

    newer = next_revision(manifest, tmp_path)
    with pytest.raises(IntegrityError) as refused:  # before: held against the serve before kvbake, and refused the same way
        lock(newer, monkeypatch)
    assert "held against release 1111222233334444" in refused.value.message and "(pkg/mod.py)" in refused.value.message
    data, text = lock(newer, monkeypatch, "--code-change", "donor revision 2: value() returns 2")
    assert data["served_proof"]["code_change"]["against"] == "release 1111222233334444"
    kept = statement_path(newer.root, data_tree(newer)).read_text()
    assert "-    return 1\n" in kept and "+    return 2\n" in kept, "the diff against the release's own bytes"

    assert restore_baseline(newer.root, BEFORE_KVBAKE, ["a", "b"]).release is None  # rollback --to adopted
    assert read_served(newer.root)[0].label() == "the serve before kvbake (image sha256:i)"
    assert restore_baseline(newer.root, "1111222233334444", ["a", "b"]).release == "1111222233334444"  # rollback to that release
    assert restore_baseline(newer.root, "ffffeeeeddddcccc", ["a", "b"]) is None, "a release deployed elsewhere leaves the baseline"
    assert read_served(newer.root)[0].release == "1111222233334444"


def test_a_project_without_a_baseline_stages_nothing_and_gets_none_from_a_deploy(tmp_path, monkeypatch):
    manifest = project(tmp_path)
    lock(manifest, monkeypatch)
    assert release_becomes_baseline(manifest.root, data_tree(manifest), "1111222233334444", ["a"]) is None
    assert not (manifest.root / ".kvbake" / "served").exists() and not (manifest.root / ".kvbake" / "baselines").exists()
