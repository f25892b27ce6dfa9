"""`verify --deep` on an image without python3: the offline bytecode proof decides. A cached file that could run
instead of the patched source fails verify (exit 7); a clean image passes and says the interpreter proof was skipped."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import struct
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

import pytest

from kvbake import cli
from kvbake.bake import commands
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.bake.core.plan import make_plan, read_overlay
from kvbake.engines.core.detection import EngineProfile

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin" / "manifest.yaml"
MTIME = 1_700_000_000


class VerifyEngine:
    """The local engine as verify uses it: one image (inspect data and files) and, optionally, its python3."""

    label = "local engine"

    def __init__(self, inspect: dict[str, Any], files: dict[str, bytes], python3: str | None = None) -> None:
        self.inspect, self.files, self.python3 = inspect, files, python3
        self.scripts: list[str] = []

    def profile(self) -> EngineProfile:
        return EngineProfile("26.1.5", "classic", "overlay2")

    def ping(self) -> dict[str, Any]:
        return {"os_type": "linux", "architecture": "x86_64"}

    def identify(self, reference: str) -> dict[str, Any] | None:
        return {**self.inspect, "ConfigDigest": self.inspect["Id"]}

    @contextlib.contextmanager
    def created_container(self, image: str) -> Iterator[str]:
        yield "extract"

    def copy_out(self, container: str, path: str, destination: Path) -> bool:
        if path in self.files:
            destination.write_bytes(self.files[path])
            os.utime(destination, (MTIME, MTIME))
            return True
        children = sorted({p[len(path) + 1:].split("/")[0] for p in self.files if p.startswith(path + "/")})
        if not children:
            return False
        destination.mkdir()
        for child in children:
            (destination / child).write_bytes(self.files.get(f"{path}/{child}", b""))
        return True

    def run_python(self, image: str, code: str) -> str | None:
        self.scripts.append(code)
        return self.python3


def image_of(manifest_path: Path = STANDIN) -> tuple[Any, dict[str, Any], dict[str, bytes]]:
    """The stand-in's plan, the inspect data of the image it builds, and the chain's files as the image holds them."""
    manifest = load_manifest(manifest_path)
    lock = read_lock(manifest)
    overlay = read_overlay(manifest, lock)
    plan = make_plan(manifest, lock, overlay)
    os_name, arch = lock.base.platform.split("/")
    inspect = {"Id": plan.image_id, "RootFS": {"Layers": [*lock.base.diff_ids, plan.layer.diff_id]},
               "Config": {"Labels": dict(plan.image_labels()), "Env": ["PATH=/usr/bin"]}, "Os": os_name, "Architecture": arch}
    files = {str(PurePosixPath(lock.source_root) / path): data for path, data in overlay.items()}
    return plan, inspect, files


def unchecked_hash_pyc() -> bytes:
    """The header of a pyc Python runs without looking at its source (hash-based, check_source off)."""
    return importlib.util.MAGIC_NUMBER + struct.pack("<I", 0b01) + b"\0" * 8 + b"code"


def verify(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, engine: VerifyEngine, *extra: str) -> tuple[int, str, str]:
    monkeypatch.setattr(commands, "Engine", lambda host=None: engine)
    code = cli.main(["verify", "--deep", "--manifest", str(STANDIN), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def python_modules(plan: Any) -> int:
    return sum(1 for f in plan.lock.files if f.path.endswith(".py"))


def test_without_python3_the_offline_proof_passes_and_the_interpreter_proof_is_said_to_be_skipped(monkeypatch, capsys):
    plan, inspect, files = image_of()
    engine = VerifyEngine(inspect, files, python3=None)
    code, out, err = verify(monkeypatch, capsys, engine)
    assert (code, err) == (0, "")
    assert len(engine.scripts) == 1, "the image's own python3 was tried"
    assert out == (f"verified {plan.reference} (config digest {plan.image_id[:19]}; docker-26.1-classic ID {plan.image_id[:19]}): "
                   f"layers, labels, no switch in Env; {len(plan.lock.files)} files read back; offline proof: "
                   f"{python_modules(plan)} modules, no cached bytecode or shadowing module can win; "
                   "interpreter proof skipped: no python3 in the image\n")


def test_without_python3_the_json_says_which_proofs_ran(monkeypatch, capsys):
    plan, inspect, files = image_of()
    code, out, _ = verify(monkeypatch, capsys, VerifyEngine(inspect, files, python3=None), "--json")
    data = json.loads(out)
    assert code == 0 and (data["deep"], data["interpreter_proof"], data["modules_proven"]) == (True, False, 0)
    assert data["offline_proven"] == python_modules(plan) > 0


def test_without_python3_a_cached_file_that_would_run_instead_of_the_patched_source_fails_verify(monkeypatch, capsys):
    plan, inspect, files = image_of()
    module = next(f.path for f in plan.lock.files if f.path.endswith(".py"))
    folder, stem = str(PurePosixPath(plan.lock.source_root) / module).rsplit("/", 1)
    pyc = f"{stem.removesuffix('.py')}.cpython-312.pyc"  # a tag the lock's whiteouts do not name
    files[f"{folder}/__pycache__/{pyc}"] = unchecked_hash_pyc()
    code, out, err = verify(monkeypatch, capsys, VerifyEngine(inspect, files, python3=None))
    assert (code, out) == (7, "")
    assert err == (f"error (integrity): deep check of {plan.reference}: 1 check(s) failed: {module}: {pyc} is an unchecked-hash pyc, "
                   "which Python runs without looking at the source; fix: do not use this image; rebuild it with python build.py\n")


def test_with_python3_the_interpreter_proof_runs_too(monkeypatch, capsys):
    plan, inspect, files = image_of()
    modules = [str(PurePosixPath(plan.lock.source_root) / f.path) for f in plan.lock.files if f.path.endswith(".py")]
    answer = repr({m: {"patched_code_runs": True, "cached_bytecode": False} for m in modules}) + "\n"
    code, out, _ = verify(monkeypatch, capsys, VerifyEngine(inspect, files, python3=answer))
    assert code == 0
    assert out.endswith(f"offline proof: {len(modules)} modules, no cached bytecode or shadowing module can win; "
                        f"interpreter proof: {len(modules)} modules run their patched code\n")
