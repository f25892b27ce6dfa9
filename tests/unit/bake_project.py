"""A tiny bake project (one patch changing a module, creating another) and its base image in a BakeEngine."""

from __future__ import annotations

import difflib
from pathlib import Path

from kvbake.manifest import Manifest
from tests.unit.bake_engine import BakeEngine, layer_tar
from tests.unit.helpers_manifest import minimal_document, tiny_manifest

BASE_IMAGE = "kvbake-test/tiny:1"
SOURCE = "usr/lib/py"
MODULE = "import os\n\n\ndef value():\n    return 1\n"
PATCHED = "import os\n\nPAIR = os.environ.get(\"TINY_SWITCH\")\nOTHER = os.environ.get(\"TINY_OTHER\")\n\n\ndef value():\n    return 1\n"
HELPER = "def helper():\n    return 2\n"
PYC = b"\xa7\r\r\n" + b"\0" * 12 + b"stale code"
BASE_CONFIG = {"architecture": "amd64", "os": "linux", "created": "2024-01-01T00:00:00Z",
               "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["python3"], "Labels": {"maintainer": "base team"}},
               "history": [{"created": "2024-01-01T00:00:00Z", "created_by": "ADD rootfs"}]}


def modification(path: str, old: str, new: str) -> bytes:
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=3)
    return f"diff --git a/{path} b/{path}\n{''.join(lines)}".encode()


def creation(path: str, text: str) -> bytes:
    body = "".join(f"+{line}" for line in text.splitlines(keepends=True))
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(text.splitlines())} @@\n{body}").encode()


PATCH = modification("pkg/mod.py", MODULE, PATCHED) + creation("pkg/helper.py", HELPER)


def project(tmp_path: Path, patch: bytes = PATCH, switches: dict | None = None) -> Manifest:
    """The tiny manifest (switches TINY_SWITCH and TINY_OTHER unless `switches` are given) with `patch` as its one patch 0001."""
    document = minimal_document()
    document["base"]["platform"] = "linux/amd64"
    if switches is not None:
        document["switches"] = switches
    return tiny_manifest(tmp_path / "project", document, {"patches/0001-tiny.patch": patch})


def base_entries(module: str = MODULE) -> list[tuple[str, bytes | None, int]]:
    return [("usr", None, 0o755), ("usr/lib", None, 0o755), (SOURCE, None, 0o755), (f"{SOURCE}/pkg", None, 0o750),
            (f"{SOURCE}/pkg/__init__.py", b"", 0o644), (f"{SOURCE}/pkg/mod.py", module.encode(), 0o640),
            (f"{SOURCE}/pkg/__pycache__", None, 0o755), (f"{SOURCE}/pkg/__pycache__/mod.cpython-311.pyc", PYC, 0o644),
            (f"{SOURCE}/pkg/__pycache__/mod.cpython-311.opt-1.pyc", PYC, 0o644),
            (f"{SOURCE}/pkg/__pycache__/other.cpython-311.pyc", PYC, 0o644)]


def engine_with_base(entries: list[tuple[str, bytes | None, int]] | None = None, store: str = "classic") -> BakeEngine:
    engine = BakeEngine(store=store)
    engine.add_image(BASE_IMAGE, BASE_CONFIG, [layer_tar(entries if entries is not None else base_entries())])
    return engine


def two_patch_project(tmp_path: Path) -> tuple[Manifest, str]:
    """A chain of 0001 (changes pkg/mod.py, creates pkg/helper.py) and 0002 (changes pkg/helper.py); returns its last text too."""
    document = minimal_document()
    document["base"]["platform"] = "linux/amd64"
    document["chain"] = [{"id": "0001", "file": "patches/0001-create.patch", "role": "feature"},
                         {"id": "0002", "file": "patches/0002-modify.patch", "role": "feature"}]
    changed = HELPER.replace("return 2", "return 3")
    patches = {"patches/0001-create.patch": modification("pkg/mod.py", MODULE, PATCHED) + creation("pkg/helper.py", HELPER),
               "patches/0002-modify.patch": modification("pkg/helper.py", HELPER, changed)}
    return tiny_manifest(tmp_path / "two", document, patches), changed
