"""Which files in __pycache__ are a module's cached bytecode: every interpreter tag and every optimisation level
(`.opt-1.pyc`, `.opt-2.pyc`), and nothing of another module; the build whites each of them out."""

from __future__ import annotations

import pytest

from kvbake.bake.adapters.extract import stale_bytecode_names

PYCACHE = [
    "mod.cpython-312.opt-2.pyc", "mod.cpython-311.pyc", "mod.cpython-311.opt-1.pyc", "mod.cpython-311.opt-2.pyc",
    "mod.cpython-312.pyc", "mod.pypy310.opt-1.pyc",
    "module.cpython-311.pyc", "module.cpython-311.opt-1.pyc",  # another module whose name starts with "mod"
    "other.cpython-311.opt-1.pyc", "mod.pyc", "mod.cpython-311.pyc.1234", "mod.cpython-311.opt-1.pyc.tmp", "mod.py",
]


@pytest.mark.parametrize("module", ["vllm/v1/mod.py", "mod.py"])
def test_every_optimisation_level_of_the_module_is_selected_and_nothing_else(module):
    assert stale_bytecode_names(module, PYCACHE) == [
        "mod.cpython-311.opt-1.pyc", "mod.cpython-311.opt-2.pyc", "mod.cpython-311.pyc",
        "mod.cpython-312.opt-2.pyc", "mod.cpython-312.pyc", "mod.pypy310.opt-1.pyc",
    ]


def test_a_module_with_only_optimised_bytecode_still_has_it_selected():
    assert stale_bytecode_names("pkg/envs.py", ["envs.cpython-311.opt-1.pyc", "envs.cpython-311.opt-2.pyc"]) == [
        "envs.cpython-311.opt-1.pyc", "envs.cpython-311.opt-2.pyc"]
    assert stale_bytecode_names("pkg/envs.py", []) == []
