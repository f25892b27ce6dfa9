"""What each `git apply` refusal tells the operator to do and which patch it names; patch ids; how git runs are logged and decoded."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kvbake.bake.adapters import gitapply
from kvbake.bake.adapters.gitapply import apply_strictly, check_strict_output, patch_id, run_git
from kvbake.errors import PatchError
from tests.unit.test_chain import BASE, MODIFY, PATCHED
from tests.unit.message_words import says
from tests.unit.test_gitapply_strict import patch_file, refused, tree_with

LABEL = "patch 0001 (1/1)"


def test_a_patch_that_does_not_apply_says_to_regenerate_it(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "something else entirely\n")
    error = refused(lambda: apply_strictly(LABEL, patch_file(tmp_path), tree))
    assert says(error.message, LABEL) and says(error.fix, "regenerate the patch against the pinned base files")


def test_a_tree_shifted_between_the_check_and_the_apply_is_refused_as_an_offset_of_the_labelled_patch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer inserts two lines after git's check passed: the real apply succeeds only with an offset."""
    tree = tree_with(tmp_path, BASE)
    real = gitapply.run_git
    stages = []

    def shift_before_the_apply(args, where, stdin=None):
        stages.append("check" if "--check" in args else "apply")
        if stages[-1] == "apply":
            (where / "pkg" / "mod.py").write_text("# one\n# two\n" + BASE)
        return real(args, where, stdin)

    monkeypatch.setattr(gitapply, "run_git", shift_before_the_apply)
    error = refused(lambda: apply_strictly(LABEL, patch_file(tmp_path, MODIFY), tree))
    assert stages == ["check", "apply"] and (tree / "pkg" / "mod.py").read_text() == "# one\n# two\n" + PATCHED
    assert says(error.message, LABEL) and says(error.message, "applies only with an offset") and says(error.message, "offset 2 lines")


@pytest.mark.parametrize(("output", "fix"), [
    ("Checking patch x.py...\nSkipped patch 'x.py'.\n", "make every path in the patch match the source tree"),
    ("Hunk #1 succeeded at 9 (offset 2 lines).\n", "regenerate the patch against the pinned base files"),
    ("Hunk #1 succeeded at 7 with fuzz 1.\n", "regenerate the patch against the pinned base files"),
], ids=["skipped", "offset", "fuzz"])
def test_a_skipped_offset_or_fuzzy_section_says_how_to_fix_the_patch(output: str, fix: str) -> None:
    with pytest.raises(PatchError) as caught:
        check_strict_output(LABEL, output)
    assert says(caught.value.message, LABEL) and says(caught.value.fix, fix)


def test_no_patch_id_names_the_patch_and_asks_for_a_changed_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gitapply, "run_git", lambda args, where, stdin=None: gitapply.GitResult(0, ""))
    error = refused(lambda: patch_id(patch_file(tmp_path), tree_with(tmp_path)))
    assert says(error.message, "0001-tiny.patch") and says(error.fix, "at least one changed line")


def test_the_patch_id_is_gits_first_field_whatever_follows_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tree_with(tmp_path)
    for answer in ("c" * 40 + "\n", "c" * 40 + " (stdin)\n"):
        monkeypatch.setattr(gitapply, "run_git", lambda args, where, stdin=None, answer=answer: gitapply.GitResult(0, answer))
        assert patch_id(patch_file(tmp_path), tree) == "c" * 40


def test_git_output_that_is_not_utf8_stays_text_and_stdout_stays_raw(tmp_path: Path) -> None:
    result = run_git(["stripspace"], tree_with(tmp_path), stdin=b"caf\xe9\n")
    assert result.returncode == 0 and result.stdout == b"caf\xe9\n" and result.output == "caf\ufffd\n"


def test_each_git_run_is_logged_with_its_arguments(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=gitapply.__name__):
        run_git(["patch-id", "--stable"], tree_with(tmp_path), stdin=b"")
    assert any(says(record.getMessage(), "git patch-id --stable") for record in caplog.records)


def test_a_patch_that_is_not_utf8_is_refused_before_git_runs_naming_the_file_and_the_byte(tmp_path: Path) -> None:
    broken = patch_file(tmp_path, MODIFY.replace(b"line 6 patched", b"line 6 \xff"))
    error = refused(lambda: apply_strictly(LABEL, broken, tree_with(tmp_path, BASE)))
    offset = MODIFY.index(b"line 6 patched") + len(b"line 6 ")
    assert says(error.message, "0001-tiny.patch") and says(error.message, f"byte {offset}")
    assert says(error.fix, "save the patch as UTF-8")
