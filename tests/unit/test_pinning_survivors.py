"""lock's refusal when the chain changes a file the serve runs as the image holds it: the written diff starts from the image's bytes."""

from __future__ import annotations

import json

import pytest

from kvbake.bake.adapters.pinning import create_lock
from kvbake.bake.core.served_overlay import (DIFFERENCES, SERVED_FILES, SERVED_RECORD, SERVED_RECORD_DIR, ServedFile, ServedOverlay,
                                             record_dict)
from kvbake.digests import sha256_hex
from kvbake.errors import IntegrityError
from kvbake.manifest import Manifest
from tests.unit.bake_project import HELPER, engine_with_base, project


@pytest.fixture(autouse=True)
def fixed_epoch(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")


def record_served(manifest: Manifest, files: dict[str, bytes]) -> None:
    """The record init writes when the serve runs `files` changed from the image (and nothing else)."""
    folder = manifest.root / SERVED_RECORD_DIR
    for path, data in files.items():
        (folder / SERVED_FILES / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / SERVED_FILES / path).write_bytes(data)
    overlay = ServedOverlay(manifest.base.source_root, "sha256:" + "0" * 64,
                            tuple(ServedFile(path, sha256_hex(data), None, "mounted from /srv/overlay") for path, data in files.items()))
    (folder / SERVED_RECORD).write_text(json.dumps(record_dict(overlay, ["a"])))


def section_of(text: str, path: str) -> list[str]:
    """The lines of one file's part of the differences file (its `# path: why` heading first)."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(f"# {path}: "))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("# ")), len(lines))
    return lines[start:end]


def test_a_chain_change_to_a_file_the_serve_runs_unchanged_is_shown_as_a_diff_from_the_image_s_file(tmp_path):
    manifest = project(tmp_path)  # the chain changes pkg/mod.py and creates pkg/helper.py
    record_served(manifest, {"pkg/helper.py": HELPER.encode()})  # the serve runs the created file, and the image's pkg/mod.py
    with pytest.raises(IntegrityError) as refused:
        create_lock(engine_with_base(), manifest)
    assert "pkg/mod.py" in refused.value.message and "pkg/helper.py" not in refused.value.message
    assert not manifest.lock_path.exists()
    section = section_of((manifest.root / SERVED_RECORD_DIR / DIFFERENCES).read_text(), "pkg/mod.py")
    assert "as the image holds it" in section[0]
    assert " import os\n" in section and " def value():\n" in section, "the image's own lines are shown as context"
    added = [line for line in section if line.startswith("+") and not line.startswith("+++")]
    assert "+import os\n" not in added and "+def value():\n" not in added
    assert any(line.startswith("+PAIR = ") for line in added) and any(line.startswith("+OTHER = ") for line in added)
