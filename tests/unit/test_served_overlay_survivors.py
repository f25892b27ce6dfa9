"""The served overlay's path rules and the ranks' refusal: paths under a source root given with a trailing slash or
ending in X, code mounted into another package tree or over a folder above the source root, and how the refusal
names the files the ranks run differently."""

from __future__ import annotations

import pytest

from kvbake.bake.core.served_overlay import ServedFile, ServedOverlay, agreed, misplaced_code_mounts, under_root
from kvbake.digests import sha256_hex
from kvbake.errors import IntegrityError

ROOT = "/usr/lib/py"


def mount(target: str) -> dict:
    return {"Type": "bind", "Source": "/srv/overlay/x", "Destination": target, "RW": False}


@pytest.mark.parametrize(("path", "root", "under"), [
    ("/usr/lib/py/vllm/a.py", "/usr/lib/py/", True),
    ("/usr/lib/py", "/usr/lib/py/", True),
    ("/srv/py/vllm/a.py", "/srv/pyX", False),
    ("/srv/pyX/vllm/a.py", "/srv/pyX", True),
])
def test_a_path_is_under_the_source_root_only_below_that_exact_folder_a_trailing_slash_aside(path, root, under):
    assert under_root(path, root) is under


@pytest.mark.parametrize(("target", "root"), [
    ("/opt/vllm/lib", "/opt/vllm/lib/site-packages"),
    ("/opt/vllm/lib/", "/opt/vllm/lib/site-packages"),
    ("/opt/vllm/libX", "/opt/vllm/libX/site-packages"),
])
def test_a_mount_over_a_folder_above_the_source_root_is_not_misplaced_code(target, root):
    assert misplaced_code_mounts({"Mounts": [mount(target)]}, root) == ()


@pytest.mark.parametrize(("target", "misplaced"), [
    ("/opt/vllm/a.py", True),
    ("/opt/site-packages/vllm", True),
    ("/opt/site-packages/README.md", False),
    ("/opt/site-packages/vllm-docs/a.txt", False),
])
def test_code_lands_in_another_package_tree_when_a_folder_on_its_way_is_vllm_or_a_package_dir(target, misplaced):
    assert misplaced_code_mounts({"Mounts": [mount(target)]}, ROOT) == ((target,) if misplaced else ())


def overlay_of(**files: bytes) -> ServedOverlay:
    return ServedOverlay(ROOT, "sha256:i", tuple(ServedFile(p, sha256_hex(d), None, "mounted from /x") for p, d in sorted(files.items())))


def refusal(a: ServedOverlay, b: ServedOverlay) -> IntegrityError:
    with pytest.raises(IntegrityError) as refused:
        agreed({"a": a, "b": b})
    return refused.value


def test_ranks_that_run_different_files_are_refused_with_a_fix():
    assert refusal(overlay_of(**{"x.py": b"1"}), overlay_of(**{"x.py": b"2"})).fix


def test_the_refusal_separates_each_differing_file_by_a_semicolon():
    refused = refusal(overlay_of(**{"x.py": b"1", "y.py": b"1"}), overlay_of(**{"x.py": b"2", "y.py": b"2"}))
    assert f"b {sha256_hex(b'2')[:12]}; y.py: a " in refused.message


def test_the_refusal_names_at_most_three_of_the_differing_files():
    mine = overlay_of(**{f"{n}.py": b"1" for n in "abcd"})
    theirs = overlay_of(**{f"{n}.py": b"2" for n in "abcd"})
    message = refusal(mine, theirs).message
    assert all(f"{n}.py" in message for n in "abc") and "d.py" not in message
