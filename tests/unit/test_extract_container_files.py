"""Copying chain files out of a never-started container: mode, owner and time, absent paths, folder listings, bytecode."""

from __future__ import annotations

import os

from kvbake.bake.adapters.extract import BaseFile, Extractor
from kvbake.digests import sha256_hex
from tests.unit.bake_engine import LAYER_MTIME
from tests.unit.bake_project import BASE_IMAGE, MODULE, PYC, engine_with_base


def copies(engine) -> list[str]:
    return [c[2] for c in engine.calls if c[0] == "copy_out"]


def test_a_regular_file_comes_out_with_its_bytes_mode_owner_and_time():
    engine = engine_with_base()
    with engine.created_container(BASE_IMAGE) as container:
        found = Extractor(engine, container, "/usr/lib/py").file("pkg/mod.py")
    assert found == BaseFile("pkg/mod.py", MODULE.encode(), 0o640, os.getuid(), os.getgid(), LAYER_MTIME)
    assert found.sha256 == sha256_hex(MODULE.encode())
    assert copies(engine) == ["/usr/lib/py/pkg/mod.py"]


def test_an_absent_path_and_a_folder_are_no_file():
    engine = engine_with_base()
    with engine.created_container(BASE_IMAGE) as container:
        extractor = Extractor(engine, container, "/usr/lib/py/")
        assert extractor.file("pkg/absent.py") is None
        assert extractor.file("pkg/__pycache__") is None
    assert copies(engine) == ["/usr/lib/py/pkg/absent.py", "/usr/lib/py/pkg/__pycache__"]


def test_a_folder_is_listed_once_and_a_file_or_an_absent_path_has_no_listing():
    engine = engine_with_base()
    with engine.created_container(BASE_IMAGE) as container:
        extractor = Extractor(engine, container, "/usr/lib/py")
        names = ["mod.cpython-311.opt-1.pyc", "mod.cpython-311.pyc", "other.cpython-311.pyc"]
        assert extractor.listing("pkg/__pycache__") == names
        assert extractor.listing("pkg/__pycache__") == names
        assert extractor.listing("pkg/mod.py") is None and extractor.listing("nowhere") is None
        assert extractor.listing("nowhere") is None
    assert copies(engine) == ["/usr/lib/py/pkg/__pycache__", "/usr/lib/py/pkg/mod.py", "/usr/lib/py/nowhere"]


def test_presence_is_read_from_the_folders_listing():
    engine = engine_with_base()
    with engine.created_container(BASE_IMAGE) as container:
        extractor = Extractor(engine, container, "/usr/lib/py")
        assert extractor.present("pkg/__pycache__/mod.cpython-311.pyc") is True
        assert extractor.present("pkg/__pycache__/gone.cpython-311.pyc") is False
        assert extractor.present("pkg/mod.py") is True
        assert extractor.present("absent/mod.py") is False
    assert copies(engine) == ["/usr/lib/py/pkg/__pycache__", "/usr/lib/py/pkg", "/usr/lib/py/absent"]


def test_a_modules_cached_bytecode_is_named_relative_to_the_source_root():
    engine = engine_with_base()
    with engine.created_container(BASE_IMAGE) as container:
        extractor = Extractor(engine, container, "/usr/lib/py")
        assert extractor.stale_bytecode("pkg/mod.py") == ["pkg/__pycache__/mod.cpython-311.opt-1.pyc", "pkg/__pycache__/mod.cpython-311.pyc"]
        assert extractor.stale_bytecode("pkg/helper.py") == []
        assert extractor.stale_bytecode("other/x.py") == []
