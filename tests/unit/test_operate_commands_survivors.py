"""`config --check --deploy`'s proof of the served bytes: the files a serve runs over its image held against the locked chain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_fleet import CONTAINER, World
from kvbake.bake.core.plan import overlay_root
from kvbake.bake.core.served_overlay import served_overlay
from kvbake.cli import main
from kvbake.errors import IntegrityError
from kvbake.lock import write_lock
from kvbake.manifest import Manifest, load_manifest
from kvbake.operate.commands import _served_bytes_proof
from message_words import says
from test_config_check_running import MANIFEST, SWITCH, world  # noqa: F401 (world is a fixture)
from tests.unit.helpers_manifest import locked_file, make_lock, tiny_manifest, write_manifest

BASE = b"value = 1\n"
PATCHED = b"value = 2\n"
SAME = b"same = 0\n"


def locked(manifest: Manifest, files: dict[str, tuple[bytes, bytes | None]]) -> Manifest:
    """The manifest locked with `files` (path -> (the chain's bytes, the image's bytes)), overlay/ holding the chain's bytes."""
    write_lock(manifest.lock_path, make_lock(manifest.sha256, tuple(locked_file(p, data, base) for p, (data, base) in files.items())))
    for path, (data, _) in files.items():
        target = overlay_root(manifest) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return manifest


def served(files: dict[str, tuple[bytes, bytes | None]], nodes: tuple[str, ...] = ("a", "b")) -> dict:
    """What every node serves over its image: path -> (the served bytes, the image's bytes)."""
    overlay = served_overlay("/usr/lib/py", "sha256:image", {p: (data, "mounted from /home/ops") for p, (data, _) in files.items()},
                             {p: base for p, (_, base) in files.items()})
    return {node: overlay for node in nodes}


def test_the_served_bytes_the_chain_bakes_are_proven_equal_file_by_file(tmp_path: Path) -> None:
    manifest = locked(tiny_manifest(tmp_path / "project"), {"pkg/mod.py": (PATCHED, BASE), "pkg/same.py": (SAME, SAME)})
    proof = _served_bytes_proof(manifest, served({"pkg/mod.py": (PATCHED, BASE)}))
    assert proof is not None and proof.equal == ("pkg/mod.py", "pkg/same.py") and proof.differences == ()


def test_a_served_overlay_is_not_proven_before_anything_is_locked(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path / "project")
    assert _served_bytes_proof(manifest, served({"pkg/mod.py": (PATCHED, BASE)})) is None


@pytest.mark.parametrize("overlays", [{}, {"a": served_overlay("/usr/lib/py", "sha256:image", {}, {})}], ids=["no-serve", "no-files"])
def test_serves_that_run_the_image_as_it_is_prove_nothing_even_when_the_chain_changes_a_file(tmp_path: Path, overlays: dict) -> None:
    manifest = locked(tiny_manifest(tmp_path / "project"), {"pkg/mod.py": (PATCHED, BASE)})
    assert _served_bytes_proof(manifest, overlays) is None


def test_served_bytes_the_chain_does_not_bake_are_refused_naming_the_first_three_files(tmp_path: Path) -> None:
    manifest = locked(tiny_manifest(tmp_path / "project"), {"pkg/mod.py": (PATCHED, BASE)})
    ran = {"a.py": (b"a\n", None), "b.py": (b"b\n", None), "c.py": (b"c\n", None), "pkg/mod.py": (b"value = 9\n", BASE)}
    with pytest.raises(IntegrityError) as refused:
        _served_bytes_proof(manifest, served(ran))
    message = refused.value.message
    assert "a.py: " in message and "; b.py: " in message and "; c.py: " in message
    assert "pkg/mod.py: " not in message, "only the first three differences are spelled out"
    assert says(refused.value.fix, "init --capture")


def test_what_a_hand_started_serve_runs_over_its_image_is_proven_against_the_lock(world: World, monkeypatch, tmp_path, capsys) -> None:
    path = write_manifest(tmp_path / "project", MANIFEST)
    locked(load_manifest(path), {"pkg/mod.py": (PATCHED, BASE)})
    for engine in world.engines.values():
        engine.run_serving(CONTAINER, "base:1", [f"{SWITCH}=3"])
        engine.containers[CONTAINER]["Changes"] = {"/src/pkg": "C", "/src/pkg/mod.py": "C"}
        engine.files[CONTAINER] = {"/src/pkg/mod.py": PATCHED}
        engine.image_files[engine.image_id_of("base:1")] = {"/src/pkg/mod.py": BASE}
    assert main(["config", "--check", *world.command_line(monkeypatch, manifest=path), "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["nodes"] == {"a": "packing", "b": "packing"}
    assert checked["served_proof"] == {"equal": ["pkg/mod.py"], "differences": []}
