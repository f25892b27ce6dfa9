"""What each chain refusal tells the operator to do, and the text of a path that is not a regular file."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbake.bake.core.chain import apply_chain, read_patched_tree
from kvbake.bake.core.nofollow import NotRegularFile
from kvbake.bake.adapters.gitapply import GitApplier
from kvbake.errors import PatchError
from tests.unit.test_chain import BASE, base_tree, project, unified
from tests.unit.message_words import says


def test_a_file_missing_at_the_end_of_the_chain_is_refused_with_the_fix_to_check_the_chain(tmp_path: Path) -> None:
    with pytest.raises(PatchError) as caught:
        read_patched_tree(base_tree(tmp_path), ["pkg/gone.py"])
    assert caught.value.exit_code == 5 and "pkg/gone.py" in caught.value.message
    assert says(caught.value.fix, "check the chain") and says(caught.value.fix, "every touched file must exist at the end")


def test_a_patch_repeating_two_earlier_patches_names_both_and_says_to_remove_it(tmp_path: Path) -> None:
    tree = base_tree(tmp_path)
    (tree / "pkg" / "other.py").write_text(BASE)
    first = BASE.replace("line 2\n", "line 2 first\n")
    second = BASE.replace("line 9\n", "line 9 second\n")
    patches = {"0001-a.patch": unified("pkg/mod.py", BASE, first), "0002-b.patch": unified("pkg/other.py", BASE, second),
               "0003-both.patch": unified("pkg/mod.py", BASE, first) + unified("pkg/other.py", BASE, second)}
    with pytest.raises(PatchError) as caught:
        apply_chain(project(tmp_path, patches), tree, GitApplier())
    assert "patch 0003 (3/3)" in caught.value.message and "after patch 0001, 0002)" in caught.value.message
    assert says(caught.value.fix, "remove the duplicate patch from the chain")


def test_a_path_that_is_not_a_regular_file_says_what_it_is() -> None:
    error = NotRegularFile("pkg/mod.py", "a symlink")
    assert (error.relative, error.kind) == ("pkg/mod.py", "a symlink")
    assert "pkg/mod.py is a symlink" in str(error)
