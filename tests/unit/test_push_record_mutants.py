"""The push record's refusals name the unpushed reference and the push that fixes them; a digest refusal says why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvbake.bake.core.plan import tag_for
from kvbake.errors import RegistryError, UsageError
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.ship.core.push_record import PUSHES_DIR, check_digest_reference, pushed_image, pushed_reference
from message_words import says

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PINNED = "127.0.0.1:5000/kvbake/standin-kvpack@sha256:" + "ab" * 32


def refusal(tmp_path: Path, record: str | None) -> tuple[RegistryError, str]:
    """pushed_image's refusal for the stand-in with `record` as its push record (None: no record), and the tag."""
    root = tmp_path / "standin"
    shutil.copytree(EXAMPLES / "standin", root, ignore=shutil.ignore_patterns(".kvbake"))
    manifest = load_manifest(root / "manifest.yaml")
    lock = read_lock(manifest)
    tag = tag_for(manifest, lock)
    if record is not None:
        (root / PUSHES_DIR).mkdir(parents=True)
        (root / PUSHES_DIR / f"{tag}.json").write_text(record)
    with pytest.raises(RegistryError) as caught:
        pushed_image(manifest, lock)
    return caught.value, f"{manifest.output.repository}:{tag}"


def test_an_unpushed_image_is_named_by_its_tag_reference_with_the_push_as_fix(tmp_path: Path) -> None:
    error, reference = refusal(tmp_path, None)
    assert says(error.message, f"{reference} has not been pushed")
    assert says(error.fix, "build.py push first")


@pytest.mark.parametrize("record", ["{not json", json.dumps({"pinned": "repo:tag"})])
def test_a_broken_push_record_is_fixed_by_pushing_again(tmp_path: Path, record: str) -> None:
    error, _ = refusal(tmp_path, record)
    assert says(error.fix, "build.py push again")


def test_a_tag_given_as_image_is_refused_because_it_can_move() -> None:
    with pytest.raises(UsageError) as caught:
        check_digest_reference("127.0.0.1:5000/kvbake/standin-kvpack:latest")
    assert says(caught.value.message, "name other content tomorrow")


def test_the_record_is_read_as_utf8_whatever_the_locale(tmp_path: Path) -> None:
    """Under the C locale without UTF-8 mode Python's default encoding is ASCII; a record naming a non-ASCII repository
    still reads."""
    pinned = "127.0.0.1:5000/kvbake/café@sha256:" + "ab" * 32
    (tmp_path / PUSHES_DIR).mkdir(parents=True)
    (tmp_path / PUSHES_DIR / "t.json").write_bytes(json.dumps({"pinned": pinned}, ensure_ascii=False).encode("utf-8"))
    code = ("import sys; from kvbake.ship.core.push_record import pushed_reference; "
            "sys.stdout.buffer.write(pushed_reference(__import__('pathlib').Path(sys.argv[1]), 'r:t', 't').encode('utf-8'))")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
           "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    assert done.stdout.decode("utf-8") == pinned
    assert pushed_reference(tmp_path, "r:t", "t") == pinned
