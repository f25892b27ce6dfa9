"""Runtime settings are outside the image identity: editing a preset, the drafter limit, prose or a comment changes
neither the lock nor the planned image; editing what the build reads does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvbake.errors import LockError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.bake.core.plan import make_plan, read_overlay

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
RUNTIME_EDITS = {
    "a preset's note": ('note: "every switch unset: the base code paths run"', 'note: "every switch unset (reviewed again)"'),
    "a preset's launcher args": ("    max_model_len: 163840\n", "    max_model_len: 163840\n    launcher_args: [--block-size, '128']\n"),
    "a preset's prefix block": ("    max_model_len: 163840\n", "    max_model_len: 163840\n    prefix_block: 128\n"),
    "a preset's length": ("max_model_len: 163840", "max_model_len: 131072"),
    "a new preset": ("presets:\n", "presets:\n  short:\n    status: untested\n    max_model_len: 4096\n    switches: {}\n    note: new\n"),
    "the drafter limit": ("presets:\n", "drafter: {max_positions: 1048576}\npresets:\n"),
    "the description": ("STAND-IN example: seven patches", "STAND-IN example (edited): seven patches"),
    "a patch summary": ('summary: "KV page packing spec', 'summary: "Packing spec'),
    "a comment": ("format: 1\n", "format: 1\n# reviewed 2026-12-01\n"),
}
IMAGE_EDITS = {
    "a switch's allowed values": ('values: ["3"]', 'values: ["3", "2"]'),
    "the output repository": ("repository: 127.0.0.1:5000/kvbake/standin-kvpack", "repository: 127.0.0.1:5000/kvbake/other"),
    "a forbidden name": ("forbidden:\n", "forbidden:\n  VLLM_DSV41_EXTRA: \"not shipped\"\n"),
}


def planned(folder: Path) -> tuple[str, str, str]:
    manifest = load_manifest(folder / "manifest.yaml")
    lock = read_lock(manifest)
    plan = make_plan(manifest, lock, read_overlay(manifest, lock))
    return plan.image_id, plan.tag, lock.core_sha256()


def edited_copy(tmp_path: Path, old: str, new: str) -> Path:
    folder = tmp_path / "standin"
    shutil.copytree(STANDIN, folder, ignore=shutil.ignore_patterns(".kvbake", "configs"))
    text = (folder / "manifest.yaml").read_text()
    assert old in text, old
    (folder / "manifest.yaml").write_text(text.replace(old, new, 1))
    return folder


@pytest.mark.parametrize("edit", RUNTIME_EDITS, ids=list(RUNTIME_EDITS))
def test_a_runtime_edit_keeps_the_lock_and_the_image(tmp_path: Path, edit: str) -> None:
    assert planned(edited_copy(tmp_path, *RUNTIME_EDITS[edit])) == planned(STANDIN)


@pytest.mark.parametrize("edit", IMAGE_EDITS, ids=list(IMAGE_EDITS))
def test_an_edit_of_what_the_build_reads_drifts_the_lock(tmp_path: Path, edit: str) -> None:
    with pytest.raises(LockError) as caught:
        planned(edited_copy(tmp_path, *IMAGE_EDITS[edit]))
    assert caught.value.exit_code == 4
    assert all(field in caught.value.message for field in ("manifest.lock.json", "drifts", "manifest.yaml", "base, donor, chain"))


def test_the_runtime_hash_follows_the_runtime_sections_only(tmp_path: Path) -> None:
    original = load_manifest(STANDIN / "manifest.yaml")
    runtime = load_manifest(edited_copy(tmp_path / "r", *RUNTIME_EDITS["a preset's note"]) / "manifest.yaml")
    prose = load_manifest(edited_copy(tmp_path / "p", *RUNTIME_EDITS["the description"]) / "manifest.yaml")
    assert runtime.image_sha256 == prose.image_sha256 == original.image_sha256
    assert runtime.runtime_sha256 != original.runtime_sha256 == prose.runtime_sha256
    assert len({original.sha256, runtime.sha256, prose.sha256}) == 3
