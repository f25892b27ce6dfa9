"""`git apply` as kvbake runs it: an isolated environment, a missing git, git's refusal reasons, offsets and patch ids."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvbake.bake.adapters import gitapply
from kvbake.bake.adapters.gitapply import GitApplier, apply_strictly, can_apply, isolated_env, patch_id, run_git
from kvbake.errors import PatchError
from tests.unit.bake_project import MODULE, PATCHED, modification

PATCH = modification("pkg/mod.py", MODULE, PATCHED)


def tree_with(tmp_path: Path, text: str = MODULE) -> Path:
    tree = tmp_path / "work" / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "mod.py").write_text(text)
    return tree


def patch_file(tmp_path: Path, data: bytes = PATCH) -> Path:
    path = tmp_path / "0001-tiny.patch"
    path.write_bytes(data)
    return path


def refused(call) -> PatchError:
    with pytest.raises(PatchError) as caught:
        call()
    assert caught.value.exit_code == 5
    return caught.value


def test_git_runs_without_any_git_setting_of_the_caller(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_DIR", "/elsewhere/.git")
    monkeypatch.setenv("GIT_WORK_TREE", "/elsewhere")
    monkeypatch.setenv("KVBAKE_KEPT", "yes")
    tree = tree_with(tmp_path)
    env = isolated_env(tree)
    assert "GIT_DIR" not in env and "GIT_WORK_TREE" not in env and env["KVBAKE_KEPT"] == "yes"
    assert (env["GIT_CONFIG_NOSYSTEM"], env["GIT_CONFIG_GLOBAL"], env["HOME"]) == ("1", os.devnull, str(tree.parent))
    assert env["GIT_CEILING_DIRECTORIES"] == str(tree.parent.resolve()) and (env["LC_ALL"], env["LANG"]) == ("C", "C")


def test_git_output_keeps_stdout_alone_and_both_streams_as_text(tmp_path):
    tree = tree_with(tmp_path)
    result = run_git(["--version"], tree)
    assert result.returncode == 0 and result.stdout.startswith(b"git version") and result.output.startswith("git version")
    failed = run_git(["no-such-subcommand"], tree)
    assert failed.returncode != 0 and failed.stdout == b"" and "no-such-subcommand" in failed.output


def test_a_missing_git_is_named_with_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    error = refused(lambda: run_git(["--version"], tree_with(tmp_path)))
    assert "git is not installed" in error.message and "apt-get install" in error.fix


def test_a_clean_patch_applies_and_then_applies_reversed(tmp_path):
    tree = tree_with(tmp_path)
    patch = patch_file(tmp_path)
    assert can_apply(patch, tree).returncode == 0 and GitApplier().applies_reversed(patch, tree) is False
    GitApplier().apply_strictly("patch 0001 (1/1)", patch, tree)
    assert (tree / "pkg" / "mod.py").read_text() == PATCHED
    assert GitApplier().applies_reversed(patch, tree) is True and can_apply(patch, tree).returncode != 0


def test_a_patch_that_does_not_apply_names_gits_first_errors(tmp_path):
    tree = tree_with(tmp_path, "something else entirely\n")
    error = refused(lambda: apply_strictly("patch 0001 (1/1)", patch_file(tmp_path), tree))
    assert error.message.startswith("patch 0001 (1/1): does not apply (error: ")
    assert "pkg/mod.py" in error.message and "searching for:" not in error.message
    assert (tree / "pkg" / "mod.py").read_text() == "something else entirely\n"


@pytest.mark.parametrize(("output", "reason"), [
    ("error: patch failed: a.py:3\nerror: a.py: patch does not apply\nerror: third\n", "error: patch failed: a.py:3; error: a.py: patch does not apply"),
    ("error: while searching for:  \nerror: b.py: patch does not apply\n", "error: b.py: patch does not apply"),
    ("Checking patch a.py...\nsomething odd\nthe last word\n", "the last word"),
    ("   \n", "no output"),
    ("", "no output"),
])
def test_the_reason_is_gits_first_two_errors_else_its_last_line(output, reason):
    assert gitapply._reason(output) == reason


def test_an_apply_that_fails_after_its_check_passed_is_reported(tmp_path, monkeypatch):
    tree = tree_with(tmp_path)
    real = gitapply.run_git

    def failing_apply(args, where, stdin=None):
        if "--check" in args:
            return real(args, where, stdin)
        return gitapply.GitResult(1, "error: disk went away\n")

    monkeypatch.setattr(gitapply, "run_git", failing_apply)
    error = refused(lambda: apply_strictly("patch 0001 (1/1)", patch_file(tmp_path), tree))
    assert "failed while applying (error: disk went away)" in error.message and "--check passed" in error.fix


@pytest.mark.parametrize("stage", ["check", "apply"])
def test_an_offset_is_refused_even_when_git_succeeds(tmp_path, monkeypatch, stage):
    calls = []

    def offset_at(args, where, stdin=None):
        calls.append("check" if "--check" in args else "apply")
        text = "Hunk #1 succeeded at 9 (offset 2 lines).\n" if calls[-1] == stage else "Applied cleanly.\n"
        return gitapply.GitResult(0, text)

    monkeypatch.setattr(gitapply, "run_git", offset_at)
    error = refused(lambda: apply_strictly("patch 0001 (1/1)", patch_file(tmp_path), tree_with(tmp_path)))
    assert "offset 2 lines" in error.message and calls == (["check"] if stage == "check" else ["check", "apply"])


def test_a_patch_that_changes_no_line_has_no_patch_id(tmp_path):
    tree = tree_with(tmp_path)
    empty = patch_file(tmp_path, b"diff --git a/pkg/mod.py b/pkg/mod.py\nold mode 100644\nnew mode 100755\n")
    error = refused(lambda: patch_id(empty, tree))
    assert "0001-tiny.patch" in error.message
    assert len(patch_id(patch_file(tmp_path), tree)) == 40


def test_a_patch_id_that_git_does_not_give_as_forty_hex_digits_is_refused(tmp_path, monkeypatch):
    tree = tree_with(tmp_path)
    for answer in (gitapply.GitResult(0, "XYZ 000\n"), gitapply.GitResult(1, "a" * 40 + " " + "b" * 40 + "\n"), gitapply.GitResult(0, "")):
        monkeypatch.setattr(gitapply, "run_git", lambda args, where, stdin=None, answer=answer: answer)
        refused(lambda: patch_id(patch_file(tmp_path), tree))
    monkeypatch.setattr(gitapply, "run_git", lambda args, where, stdin=None: gitapply.GitResult(0, "c" * 40 + " " + "d" * 40 + "\n"))
    assert patch_id(patch_file(tmp_path), tree) == "c" * 40
