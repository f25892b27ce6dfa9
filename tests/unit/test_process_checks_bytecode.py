"""Which added files under the source root are only Python's own bytecode cache: a `.pyc` inside `__pycache__` whose
source is unchanged; any other file there, or a `.pyc` outside `__pycache__`, is a change."""

from __future__ import annotations

from kvbake.ship.core.process_checks import changed_files, written_bytecode

ROOT = "/usr/lib/py"


def test_only_a_pyc_inside_pycache_with_an_unchanged_source_is_bytecode():
    assert written_bytecode(f"{ROOT}/pkg/__pycache__/mod.cpython-311.pyc", {})
    assert written_bytecode(f"{ROOT}/pkg/__pycache__", {})
    assert not written_bytecode(f"{ROOT}/pkg/__pycache__/mod.cpython-311.pyc", {f"{ROOT}/pkg/mod.py": "C"})
    assert not written_bytecode(f"{ROOT}/pkg/__pycache__/notes.txt", {})
    assert not written_bytecode(f"{ROOT}/pkg/mod.pyc", {})


def test_files_dropped_beside_the_cache_are_changes():
    changes = {f"{ROOT}/pkg/__pycache__": "A", f"{ROOT}/pkg/__pycache__/mod.cpython-311.pyc": "A",
               f"{ROOT}/pkg/__pycache__/notes.txt": "A", f"{ROOT}/pkg/stray.pyc": "A"}
    assert changed_files(changes, ROOT) == [(f"{ROOT}/pkg/__pycache__/notes.txt", "A"), (f"{ROOT}/pkg/stray.pyc", "A")]
