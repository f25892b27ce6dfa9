"""A tiny file-only base image and project, for fast integration tests of every bad input."""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
import textwrap
from pathlib import Path

from kvbake.engines.adapters.client import Engine

TINY_BASE = "kvbake-test/tiny:1"
SOURCE_ROOT = "usr/lib/py"
MOD_V1 = "import os\n\nA = 1\nB = 2\n\n\ndef f():\n    return A\n\n\ndef g():\n    return B\n"
OTHER = "y = 1\n"

MANIFEST = textwrap.dedent("""\
    format: 1
    name: tiny
    standin: true
    base: {image: "kvbake-test/tiny:1", platform: native, source_root: /usr/lib/py}
    donor: {url: "https://example.invalid/tiny.git", revision: "0123456789abcdef0123456789abcdef01234567"}
    chain:
      - {id: "0001", file: patches/0001-switch.patch, role: dependency, needed_by: ["0002"]}
      - {id: "0002", file: patches/0002-new-module.patch, role: feature}
    switches:
      TINY_SWITCH: {values: ["3"]}
      TINY_OTHER: {values: ["1"], requires: [TINY_SWITCH]}
    forbidden: {TINY_BAD: "never set: its code path is not shipped"}
    presets:
      control: {status: validated, max_model_len: 1024, switches: {}, note: "all off"}
    output: {repository: "127.0.0.1:5000/tiny", tag: "{base_tag}-kvpack-{short_id}"}
    """)


def _member(tar: tarfile.TarFile, name: str, data: bytes | None, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 1_700_000_000
    if data is None:
        info.type, info.mode = tarfile.DIRTYPE, mode
        tar.addfile(info)
    else:
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))


def base_tar(mod: str = MOD_V1, extra: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for directory in ("usr", "usr/lib", "usr/lib/py", "usr/lib/py/pkg", "usr/lib/py/pkg/__pycache__"):
            _member(tar, directory, None, 0o750 if directory.endswith("pkg") else 0o755)
        _member(tar, f"{SOURCE_ROOT}/pkg/mod.py", mod.encode(), 0o640)
        _member(tar, f"{SOURCE_ROOT}/pkg/other.py", OTHER.encode(), 0o644)
        _member(tar, f"{SOURCE_ROOT}/pkg/__pycache__/mod.cpython-311.pyc", b"stale", 0o644)
        _member(tar, f"{SOURCE_ROOT}/pkg/__pycache__/mod.cpython-311.opt-1.pyc", b"stale", 0o644)
        _member(tar, f"{SOURCE_ROOT}/pkg/__pycache__/other.cpython-311.pyc", b"keep", 0o644)
        for path in extra:
            _member(tar, f"{SOURCE_ROOT}/{path}", b"", 0o644)
    return buffer.getvalue()


def import_base(engine: Engine, reference: str = TINY_BASE, mod: str = MOD_V1, extra: tuple[str, ...] = ()) -> str:
    """Import the tiny base (file-only) once and return its ID."""
    found = engine.inspect_image(reference)
    if found is None:
        with tempfile.TemporaryDirectory(prefix="kvbake-tiny-") as tmp:
            path = Path(tmp, "base.tar")
            path.write_bytes(base_tar(mod, extra))
            engine.client.image.import_(path, tag=reference)
        found = engine.inspect_image(reference)
    return found["Id"]


def diff(path: str, old: str | None, new: str) -> str:
    """A git-style unified diff made by git itself (no hand-written hunks)."""
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp, "a"), Path(tmp, "b")
        for root in (a, b):
            root.mkdir()
        if old is not None:
            (a / path).parent.mkdir(parents=True, exist_ok=True)
            (a / path).write_text(old)
        (b / path).parent.mkdir(parents=True, exist_ok=True)
        (b / path).write_text(new)
        done = subprocess.run(["git", "diff", "--no-index", "--no-prefix", "a", "b"], cwd=tmp, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr)
    return done.stdout


MOD_V2 = MOD_V1.replace("B = 2\n", 'B = int(os.environ.get("TINY_SWITCH", "2"))\n')
MOD_V3 = MOD_V2.replace("    return B\n", '    if os.getenv("TINY_OTHER"):\n        return helper()\n    return B\n')
NEW = 'import os\n\n\ndef helper():\n    return os.environ.get("TINY_BAD", "")\n'


def write_project(root: Path) -> Path:
    """A two-patch chain: a dependency that edits pkg/mod.py, and a feature that edits it again and creates pkg/new.py."""
    (root / "patches").mkdir(parents=True)
    (root / "manifest.yaml").write_text(MANIFEST)
    (root / "patches/0001-switch.patch").write_text(diff("pkg/mod.py", MOD_V1, MOD_V2))
    second = diff("pkg/mod.py", MOD_V2, MOD_V3) + diff("pkg/new.py", None, NEW)
    (root / "patches/0002-new-module.patch").write_text(second)
    return root / "manifest.yaml"
