"""The served overlay as plain data: which mounts count, where a serve imports vllm from, the ranks' agreement, and the
proof that a chain's result is exactly the served bytes; and lock's use of that proof over a fake engine."""

from __future__ import annotations

import json

import pytest

from kvbake.bake.adapters.pinning import create_lock
from kvbake.bake.commands import cmd_lock
from kvbake.bake.core.served_overlay import (ServedFile, ServedOverlay, agreed, misplaced_code_mounts, overlay_mounts, prove,
                                             record_dict, record_from_dict, served_overlay, source_root_of)
from kvbake.cli import parse_args
from kvbake.digests import sha256_hex
from kvbake.errors import IntegrityError, UsageError
from tests.unit.bake_project import HELPER, MODULE, PATCHED, engine_with_base, project

ROOT = "/usr/lib/py"


def mount(target: str, source: str = "/srv/overlay/x") -> dict:
    return {"Type": "bind", "Source": source, "Destination": target, "RW": False}


def test_the_source_root_is_the_folder_holding_the_vllm_package_the_serve_imports():
    assert source_root_of("/usr/local/lib/python3.11/dist-packages/vllm/__init__.py") == "/usr/local/lib/python3.11/dist-packages"
    assert source_root_of("/opt/vllm.py") is None and source_root_of(None) is None


def test_only_mounts_at_or_under_the_source_root_are_overlay_and_one_above_it_is_refused():
    container = {"Name": "/serve", "Mounts": [mount(f"{ROOT}/vllm/a.py"), mount("/models/m"), mount(ROOT + "x/y.py"),
                                               mount(f"{ROOT}/vllm/models", "/srv/dir")]}
    assert overlay_mounts(container, ROOT) == ((f"{ROOT}/vllm/a.py", "/srv/overlay/x"), (f"{ROOT}/vllm/models", "/srv/dir"))
    with pytest.raises(UsageError, match="serve mounts /usr/lib, a folder above the source root /usr/lib/py"):
        overlay_mounts({"Name": "/serve", "Mounts": [mount("/usr/lib")]}, ROOT)


def test_python_code_mounted_into_another_package_tree_is_misplaced():
    container = {"Mounts": [mount("/usr/local/lib/python3.12/dist-packages/vllm/a.py"), mount("/models/m"), mount(f"{ROOT}/vllm/b.py"),
                            mount("/opt/site-packages/extra.pth"), mount("/root/.cache/vllm")]}
    assert misplaced_code_mounts(container, ROOT) == ("/opt/site-packages/extra.pth", "/usr/local/lib/python3.12/dist-packages/vllm/a.py")


def test_a_served_copy_equal_to_the_images_file_is_no_difference():
    overlay, data = served_overlay(ROOT, "sha256:i", {"a.py": (b"new", "mounted from /x"), "b.py": (b"same", "mounted from /y"),
                                                      "c.py": (b"added", "changed in the container's writable layer")},
                                   {"a.py": b"old", "b.py": b"same", "c.py": None})
    assert [(f.path, f.base_sha256) for f in overlay.files] == [("a.py", sha256_hex(b"old")), ("c.py", None)]
    assert data == {"a.py": b"new", "c.py": b"added"}


def overlay_of(**files: bytes) -> ServedOverlay:
    return ServedOverlay(ROOT, "sha256:i", tuple(ServedFile(p, sha256_hex(d), None, "mounted from /x") for p, d in sorted(files.items())))


def test_ranks_agree_or_are_refused_naming_the_file_and_both_hashes():
    assert agreed({"a": overlay_of(**{"x.py": b"1"}), "b": overlay_of(**{"x.py": b"1"})}).files[0].path == "x.py"
    with pytest.raises(IntegrityError, match=rf"x.py: a {sha256_hex(b'1')[:12]}, b {sha256_hex(b'2')[:12]}"):
        agreed({"a": overlay_of(**{"x.py": b"1"}), "b": overlay_of(**{"x.py": b"2"})})
    with pytest.raises(IntegrityError, match="y.py: a the image's file, b "):
        agreed({"a": overlay_of(**{"x.py": b"1"}), "b": overlay_of(**{"x.py": b"1", "y.py": b"3"})})


def test_the_proof_holds_only_when_every_served_file_is_the_chains_result_and_nothing_more():
    served = overlay_of(**{"a.py": b"patched\n", "n.py": b"new\n"})
    data = {"a.py": b"patched\n", "n.py": b"new\n"}
    proof = prove(served, data, {"a.py": b"patched\n", "n.py": b"new\n"}, {"a.py": sha256_hex(b"old\n"), "n.py": None})
    assert proof.equal == ("a.py", "n.py") and not proof.differences
    assert proof.line() == "the baked image holds the bytes the serve runs: 2 files, sha256 equal"
    drift = prove(served, data, {"a.py": b"other\n", "n.py": b"new\n", "c.py": b"changed\n", "d.py": b"created\n"},
                  {"a.py": sha256_hex(b"old\n"), "n.py": None, "c.py": sha256_hex(b"image\n"), "d.py": None}, {"c.py": b"image\n"})
    assert [(d.path, d.why) for d in drift.differences] == [
        ("a.py", "the chain's result differs from the served file"),
        ("c.py", "the chain changes a file the serve runs as the image holds it"),
        ("d.py", "the chain creates a file the serve does not run")]
    assert "-patched\n" in drift.differences[0].diff and "+other\n" in drift.differences[0].diff
    assert "-image\n" in drift.differences[1].diff and "+changed\n" in drift.differences[1].diff
    missing = prove(served, data, {"a.py": b"patched\n"}, {"a.py": sha256_hex(b"old\n")})
    assert [(d.path, d.why) for d in missing.differences] == [("n.py", "the serve runs a changed file the chain does not touch")]
    assert missing.line().startswith("the baked image would NOT hold the bytes the serve runs: 1 of 2 files differ (n.py)")


def test_a_record_reads_back_and_a_foreign_one_is_refused():
    overlay = overlay_of(**{"a.py": b"1"})
    assert record_from_dict(json.loads(json.dumps(record_dict(overlay, ["a", "b"]))), "r") == overlay
    with pytest.raises(IntegrityError, match="r is not a served-overlay record"):
        record_from_dict({"format": 9}, "r")


def write_record(root, files: dict[str, bytes], source_root: str = ROOT) -> None:
    folder = root / ".kvbake" / "served"
    for path, data in files.items():
        (folder / "files" / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / "files" / path).write_bytes(data)
    overlay = ServedOverlay(source_root, "sha256:i", tuple(ServedFile(p, sha256_hex(d), None, "mounted from /x") for p, d in files.items()))
    (folder / "record.json").write_text(json.dumps(record_dict(overlay, ["a"])))


@pytest.fixture(autouse=True)
def fixed_epoch(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")


def test_lock_proves_the_chain_bakes_the_served_bytes_and_says_so(tmp_path, monkeypatch):
    manifest = project(tmp_path)
    write_record(manifest.root, {"pkg/mod.py": PATCHED.encode(), "pkg/helper.py": HELPER.encode()})
    engine = engine_with_base()
    monkeypatch.setattr("kvbake.bake.commands.Engine", lambda host: engine)
    data, text = cmd_lock(parse_args(["lock", "--manifest", str(manifest.path)], "build.py"))
    assert data["served_proof"] == {"equal": ["pkg/helper.py", "pkg/mod.py"], "differences": [], "against": "the serve before kvbake (image sha256:i)"}
    assert "proof: the baked image holds the bytes the serve runs: 2 files, sha256 equal" in text.splitlines()


def test_lock_refuses_a_chain_whose_result_differs_from_the_served_bytes_and_writes_nothing(tmp_path):
    manifest = project(tmp_path)
    write_record(manifest.root, {"pkg/mod.py": MODULE.encode() + b"# edited on the node\n", "pkg/helper.py": HELPER.encode()})
    with pytest.raises(IntegrityError, match=r"lock: the baked image would NOT hold the bytes the serve runs: 1 of 2 files differ "
                                             r"\(pkg/mod.py\), held against the serve before kvbake \(image sha256:i\); "
                                             r"each diff is in .kvbake/served/differences.diff"):
        create_lock(engine_with_base(), manifest)
    assert not manifest.lock_path.exists() and not (manifest.root / "overlay").exists()
    report = (manifest.root / ".kvbake" / "served" / "differences.diff").read_text()
    assert report.startswith("# pkg/mod.py: the chain's result differs from the served file\n") and "-# edited on the node\n" in report


def test_lock_refuses_a_record_read_under_another_source_root_or_whose_copy_was_changed(tmp_path):
    manifest = project(tmp_path)
    write_record(manifest.root, {"pkg/mod.py": PATCHED.encode()}, source_root="/usr/lib/python3.12")
    with pytest.raises(IntegrityError, match="read under /usr/lib/python3.12, but the manifest's base.source_root is /usr/lib/py"):
        create_lock(engine_with_base(), manifest)
    write_record(manifest.root, {"pkg/mod.py": PATCHED.encode()})
    (manifest.root / ".kvbake" / "served" / "files" / "pkg" / "mod.py").write_text("changed since")
    with pytest.raises(IntegrityError, match=r"files/pkg/mod.py is not the file the record names"):
        create_lock(engine_with_base(), manifest)
    assert not manifest.lock_path.exists()
