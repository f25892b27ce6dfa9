"""trace's links that the project folder alone proves (no engine, no registry), on a copy of the stand-in example."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvbake.lock import load_lock_file, read_lock
from kvbake.manifest import Manifest, load_manifest
from kvbake.provenance.adapters.evidence import local_links, pushed_digest

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"


@pytest.fixture()
def standin(tmp_path: Path) -> Manifest:
    root = tmp_path / "standin"
    shutil.copytree(STANDIN, root, ignore=shutil.ignore_patterns(".kvbake"))
    return load_manifest(root / "manifest.yaml")


def broken(manifest: Manifest) -> list[tuple[str, str]]:
    return [(link.kind, link.name) for link in local_links(manifest, load_lock_file(manifest.lock_path)) if not link.holds]


def test_every_local_link_of_the_committed_example_holds(standin: Manifest) -> None:
    links = local_links(standin, read_lock(standin))
    assert [link.kind for link in links] == ["donor", "donor", *["patch"] * 7, *["file"] * 9, "layer", "config"]
    assert all(link.holds for link in links)


def test_an_edited_overlay_file_breaks_its_file_link_and_the_image_links(standin: Manifest) -> None:
    path = standin.root / "overlay" / "vllm" / "envs.py"
    path.write_bytes(path.read_bytes() + b"# edited\n")
    assert broken(standin) == [("file", "vllm/envs.py"), ("layer", "thin layer diff_id"), ("config", "image config digest")]


def test_a_changed_patch_breaks_its_link_and_a_missing_overlay_file_breaks_the_image_links(standin: Manifest) -> None:
    patch = standin.chain[0].path
    patch.write_bytes(patch.read_bytes().replace(b"\n", b"\n", 1) + b"\n")
    (standin.root / "overlay" / "vllm" / "envs.py").unlink()
    found = broken(standin)
    assert (("patch", standin.chain[0].id) in found and ("file", "vllm/envs.py") in found
            and found[-2:] == [("layer", "thin layer diff_id"), ("config", "image config digest")])


def test_a_moved_donor_revision_breaks_the_first_link(standin: Manifest) -> None:
    text = standin.path.read_text()
    standin.path.write_text(text.replace(standin.donor.revision, "0" * 40))
    assert broken(load_manifest(standin.path))[:2] == [("donor", "manifest image sections"), ("donor", "commit")]


def test_a_push_record_without_a_digest_reference_gives_none(tmp_path: Path) -> None:
    (tmp_path / "ok.json").write_text('{"pinned": "r/x@sha256:' + "a" * 64 + '"}')
    (tmp_path / "tag.json").write_text('{"pinned": "r/x:1"}')
    (tmp_path / "list.json").write_text("[1]")
    assert pushed_digest(tmp_path / "ok.json") == "r/x@sha256:" + "a" * 64
    assert [pushed_digest(tmp_path / n) for n in ("tag.json", "list.json", "absent.json")] == [None, None, None]
