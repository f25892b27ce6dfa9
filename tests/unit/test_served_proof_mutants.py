"""The served-overlay record as lock reads it: an unreadable record, a missing or changed served copy, a record of no file,
the hashes and image bytes the proof is held against, and lock's result text keeping its summary beside the proof line."""

from __future__ import annotations

import json

import pytest

from kvbake.bake.adapters.served_proof import read_served, require_served_proof, served_proof
from kvbake.bake.commands import cmd_lock
from kvbake.bake.core.served_overlay import ServedFile, ServedOverlay, record_dict
from kvbake.cli import parse_args
from kvbake.digests import sha256_hex
from kvbake.errors import IntegrityError
from tests.unit.bake_project import HELPER, PATCH, PATCHED, engine_with_base, modification, project
from tests.unit.helpers_manifest import minimal_document, tiny_manifest

ROOT = "/usr/lib/py"


def record(root, files: dict[str, bytes], copies: dict[str, bytes] | None = None) -> None:
    folder = root / ".kvbake" / "served"
    for path, data in (files if copies is None else copies).items():
        (folder / "files" / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / "files" / path).write_bytes(data)
    folder.mkdir(parents=True, exist_ok=True)
    overlay = ServedOverlay(ROOT, "sha256:i", tuple(ServedFile(p, sha256_hex(d), None, "mounted from /x") for p, d in files.items()))
    (folder / "record.json").write_text(json.dumps(record_dict(overlay, ["a"])))


def test_an_unparsable_record_is_refused_naming_the_record_the_error_type_and_a_fix(tmp_path):
    (tmp_path / ".kvbake" / "served").mkdir(parents=True)
    (tmp_path / ".kvbake" / "served" / "record.json").write_text("{not json")
    with pytest.raises(IntegrityError) as refused:
        read_served(tmp_path)
    assert ".kvbake/served/record.json" in refused.value.message and "JSONDecodeError" in refused.value.message
    assert refused.value.fix


def test_a_record_of_another_shape_is_refused_naming_the_record(tmp_path):
    (tmp_path / ".kvbake" / "served").mkdir(parents=True)
    (tmp_path / ".kvbake" / "served" / "record.json").write_text(json.dumps({"format": 9}))
    with pytest.raises(IntegrityError) as refused:
        read_served(tmp_path)
    assert refused.value.message.startswith(".kvbake/served/record.json ")


def test_a_served_copy_that_is_missing_is_refused_with_the_recorded_hash_and_a_fix(tmp_path):
    record(tmp_path, {"pkg/a.py": b"served\n"}, copies={})
    with pytest.raises(IntegrityError) as refused:
        read_served(tmp_path)
    digest = sha256_hex(b"served\n")
    assert "files/pkg/a.py" in refused.value.message and f"sha256 {digest[:16]}…" in refused.value.message
    assert refused.value.fix


def test_a_recorded_empty_file_without_a_copy_reads_as_empty(tmp_path):
    record(tmp_path, {"pkg/empty.py": b""}, copies={})
    overlay, data = read_served(tmp_path)
    assert data == {"pkg/empty.py": b""} and [f.path for f in overlay.files] == ["pkg/empty.py"]


def test_a_record_read_under_another_source_root_is_refused_with_a_fix(tmp_path):
    record(tmp_path, {"pkg/a.py": b"served\n"})
    with pytest.raises(IntegrityError) as refused:
        served_proof(tmp_path, "/elsewhere", {"pkg/a.py": b"served\n"}, {"pkg/a.py": None})
    assert "/elsewhere" in refused.value.message and refused.value.fix


@pytest.mark.parametrize(("chain", "base"), [
    ({"pkg/c.py": b"changed\n"}, {"pkg/c.py": sha256_hex(b"image\n")}),
    ({"pkg/new.py": b"created\n"}, {"pkg/new.py": None}),
], ids=["changes an image file", "creates a file"])
def test_a_record_of_a_serve_that_ran_its_image_unchanged_holds_no_chain(tmp_path, chain, base):
    """A serve that changed no file gives no proof to hold a chain against: lock takes any chain, as without a record."""
    record(tmp_path, {})
    assert read_served(tmp_path)[0].files == ()
    assert require_served_proof(tmp_path, ROOT, chain, base, {"pkg/c.py": b"image\n"}).proof is None
    assert served_proof(tmp_path, ROOT, chain, base) is None
    assert not (tmp_path / ".kvbake" / "served" / "differences.diff").exists()


def test_a_chain_file_the_serve_runs_as_the_image_holds_it_is_proven_by_the_images_hash(tmp_path):
    record(tmp_path, {"pkg/a.py": b"served\n"})
    chain = {"pkg/a.py": b"served\n", "pkg/same.py": b"image\n"}
    proof = served_proof(tmp_path, ROOT, chain, {"pkg/a.py": None, "pkg/same.py": sha256_hex(b"image\n")}, {"pkg/same.py": b"image\n"})
    assert proof.equal == ("pkg/a.py", "pkg/same.py") and proof.differences == ()
    assert require_served_proof(tmp_path, ROOT, chain, {"pkg/a.py": None, "pkg/same.py": sha256_hex(b"image\n")},
                                {"pkg/same.py": b"image\n"}).proof.equal == ("pkg/a.py", "pkg/same.py")


def test_a_difference_against_the_image_shows_the_images_lines(tmp_path):
    record(tmp_path, {"pkg/a.py": b"served\n"})
    chain = {"pkg/a.py": b"served\n", "pkg/c.py": b"changed\n"}
    base = {"pkg/a.py": None, "pkg/c.py": sha256_hex(b"image\n")}
    proof = served_proof(tmp_path, ROOT, chain, base, {"pkg/c.py": b"image\n"})
    assert [d.path for d in proof.differences] == ["pkg/c.py"] and "-image\n" in proof.differences[0].diff
    with pytest.raises(IntegrityError):
        require_served_proof(tmp_path, ROOT, chain, base, {"pkg/c.py": b"image\n"})
    report = (tmp_path / ".kvbake" / "served" / "differences.diff").read_text()
    assert report.startswith("# pkg/c.py: ") and "-image\n" in report and "+changed\n" in report


@pytest.fixture()
def fixed_epoch(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")


def test_locks_text_keeps_its_summary_line_before_the_proof_line(tmp_path, monkeypatch, fixed_epoch):
    manifest = project(tmp_path)
    record(manifest.root, {"pkg/mod.py": PATCHED.encode(), "pkg/helper.py": HELPER.encode()})
    engine = engine_with_base()
    monkeypatch.setattr("kvbake.bake.commands.Engine", lambda host: engine)
    data, text = cmd_lock(parse_args(["lock", "--manifest", str(manifest.path)], "build.py"))
    lines = text.splitlines()
    assert lines[0].startswith("locked ") and manifest.lock_path.name in lines[0]
    assert lines[-1].startswith("proof: ") and data["served_proof"]["differences"] == []


def test_lock_proves_a_file_the_chain_changes_and_changes_back_by_the_images_hash(tmp_path, monkeypatch, fixed_epoch):
    document = minimal_document()
    document["base"]["platform"] = "linux/amd64"
    document["chain"].append({"id": "0002", "file": "patches/0002-back.patch", "role": "feature"})
    patches = {"patches/0001-tiny.patch": PATCH + modification("pkg/__init__.py", "", "x = 1\n"),
               "patches/0002-back.patch": modification("pkg/__init__.py", "x = 1\n", "")}
    manifest = tiny_manifest(tmp_path / "project", document, patches)
    record(manifest.root, {"pkg/mod.py": PATCHED.encode(), "pkg/helper.py": HELPER.encode()})
    engine = engine_with_base()
    monkeypatch.setattr("kvbake.bake.commands.Engine", lambda host: engine)
    data, _ = cmd_lock(parse_args(["lock", "--manifest", str(manifest.path)], "build.py"))
    assert data["served_proof"] == {"equal": ["pkg/__init__.py", "pkg/helper.py", "pkg/mod.py"], "differences": [],
                                    "against": "the serve before kvbake (image sha256:i)"}
