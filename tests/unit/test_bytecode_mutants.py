"""The interpreter tags read from cached bytecode names, and the shadow candidates for top-level, nested and unknown-platform modules."""

from __future__ import annotations

from kvbake.bake.core.bytecode import python_tags, shadow_candidates


def test_a_tag_is_read_from_the_file_name_even_below_dotted_folders() -> None:
    names = ("usr/lib/python3.11/site-packages/pkg/__pycache__/mod.cpython-311.pyc",)
    assert python_tags(names) == ("cpython-311",)


def test_a_bare_cached_file_name_gives_its_tag() -> None:
    assert python_tags(("mod.cpython-312.pyc",)) == ("cpython-312",)


def test_a_plain_pyc_name_with_two_dots_is_enough_for_a_tag() -> None:
    assert python_tags(("pkg/__pycache__/mod.cpython-311.pyc",)) == ("cpython-311",)


def test_pypy_tags_count_and_other_middles_do_not() -> None:
    names = ("pkg/__pycache__/mod.pypy310.pyc", "pkg/__pycache__/mod.cpython-311.pyc", "pkg/__pycache__/mod.backup.pyc")
    assert python_tags(names) == ("cpython-311", "pypy310")


def test_a_top_level_module_has_top_level_shadows() -> None:
    assert shadow_candidates("mod.py", ("cpython-311",), "amd64") == (
        "mod/__init__.py", "mod.so", "mod.abi3.so", "mod.cpython-311-x86_64-linux-gnu.so")


def test_a_deeply_nested_module_keeps_every_folder() -> None:
    candidates = shadow_candidates("a/b/mod.py", (), "amd64")
    assert candidates == ("a/b/mod/__init__.py", "a/b/mod.so", "a/b/mod.abi3.so")


def test_an_architecture_without_a_known_triplet_gets_the_linux_gnu_one() -> None:
    assert shadow_candidates("pkg/mod.py", ("cpython-311",), "riscv64")[-1] == "pkg/mod.cpython-311-riscv64-linux-gnu.so"
