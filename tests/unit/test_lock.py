"""Tests of the lock: its bytes round trip, its core identity, and refusing a missing, malformed or drifted lock."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest

from kvbake.cli import main
from kvbake.errors import LockError
from kvbake.lock import Derived, LockedDir, lock_bytes, lock_from_dict, lock_to_dict, read_lock, write_lock
from kvbake.bake.core.overlayswap import exclusive
from tests.unit.helpers_manifest import locked_file, make_lock, tiny_manifest


def full_lock(manifest_sha256: str = "0" * 64):
    return make_lock(
        manifest_sha256=manifest_sha256,
        files=(locked_file("pkg/mod.py", b"new\n", stale=("pkg/__pycache__/mod.cpython-311.pyc",)),
               locked_file("pkg/fresh/helper.py", b"helper\n", base=None, mode=0o600, uid=1000, gid=1001)),
        dirs=(LockedDir("usr/lib/py/pkg", 0o775, 1000, 1001, 1_600_000_000),),
        new_dirs=("pkg/fresh",), repo_digest="sha256:" + "f" * 64,
    )


def test_lock_bytes_round_trip() -> None:
    lock = full_lock()
    again = lock_from_dict(json.loads(lock_bytes(lock)))
    assert again == lock
    assert lock_bytes(again) == lock_bytes(lock)


def test_lock_bytes_are_sorted_indented_and_newline_terminated() -> None:
    data = lock_bytes(full_lock())
    assert data.endswith(b"}\n")
    assert data == (json.dumps(json.loads(data), sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


def test_core_sha256_ignores_the_derived_section() -> None:
    lock = full_lock()
    other = lock.with_derived(Derived(layer_diff_id="sha256:" + "8" * 64, image_id="sha256:" + "9" * 64))
    assert other.derived != lock.derived
    assert other.core_sha256() == lock.core_sha256()


@pytest.mark.parametrize("change", [
    {"source_date_epoch": 1}, {"overlay_tree_sha256": "f" * 64}, {"new_dirs": ()}, {"manifest_sha256": "e" * 64},
])
def test_core_sha256_follows_everything_else(change: dict) -> None:
    lock = full_lock()
    assert replace(lock, **change).core_sha256() != lock.core_sha256()


def test_file_finds_a_locked_file_by_path() -> None:
    assert full_lock().file("pkg/fresh/helper.py").base_sha256 is None


def test_write_lock_writes_the_bytes_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "manifest.lock.json"
    write_lock(target, full_lock())
    assert target.read_bytes() == lock_bytes(full_lock())
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.lock.json"]


def test_read_lock_returns_the_matching_lock(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    write_lock(manifest.lock_path, full_lock(manifest.sha256))
    assert read_lock(manifest) == full_lock(manifest.sha256)


def test_a_missing_lock_names_the_command_that_creates_it(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    with pytest.raises(LockError) as caught:
        read_lock(manifest)
    assert caught.value.exit_code == 4
    text = caught.value.one_line()
    assert "manifest.lock.json is missing" in text
    assert "python build.py lock" in text


def test_a_drifted_manifest_is_refused(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    write_lock(manifest.lock_path, full_lock("d" * 64))
    with pytest.raises(LockError, match="manifest.lock.json drifts from manifest.yaml") as caught:
        read_lock(manifest)
    assert caught.value.exit_code == 4


def test_another_format_is_refused(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    write_lock(manifest.lock_path, replace(full_lock(manifest.sha256), format=4))
    with pytest.raises(LockError) as caught:
        read_lock(manifest)
    assert caught.value.exit_code == 4
    assert all(field in caught.value.message for field in ("manifest.lock.json", "format 4", "writes 3"))
    assert "build.py lock" in caught.value.fix


@pytest.mark.parametrize("text,named", [
    ("{not json", ("not JSON", "line 1 column 2")),
    ("{}", ("top level", "'format'")),
    ('{"format": 1}', ("top level", "'manifest_sha256'")),
    ("[]", ("top level", "object", "list")),
], ids=["{not json", "{}", '{"format": 1}', "[]"])
def test_a_malformed_lock_is_a_lock_error(text: str, named: tuple[str, ...], tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    manifest.lock_path.write_text(text, encoding="utf-8")
    with pytest.raises(LockError) as caught:
        read_lock(manifest)
    assert caught.value.exit_code == 4
    assert "manifest.lock.json" in caught.value.message and "malformed" in caught.value.message
    assert all(field in caught.value.message for field in named), caught.value.message
    assert "version control" in caught.value.fix and "build.py lock" in caught.value.fix
    assert "\n" not in caught.value.one_line()


class Crash(BaseException):
    """Stands for the process dying between writing the temporary file and renaming it."""


def test_write_lock_uses_a_unique_temporary_name_and_leaves_an_existing_tmp_file_alone(tmp_path: Path) -> None:
    target = tmp_path / "manifest.lock.json"
    foreign = tmp_path / "manifest.lock.json.tmp"
    foreign.write_bytes(b"someone else's file")
    seen: list[str] = []
    write_lock(target, full_lock(), before_rename=lambda: seen.extend(sorted(p.name for p in tmp_path.iterdir())))
    assert foreign.read_bytes() == b"someone else's file"
    temporary = [name for name in seen if name.startswith(".manifest.lock.json.") and name.endswith(".partial")]
    assert len(temporary) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.lock.json", "manifest.lock.json.tmp"]


def test_write_lock_cut_short_before_the_rename_keeps_the_old_lock(tmp_path: Path) -> None:
    target = tmp_path / "manifest.lock.json"
    target.write_bytes(b"old lock")

    def crash() -> None:
        raise Crash()

    with pytest.raises(Crash):
        write_lock(target, full_lock(), before_rename=crash)
    assert target.read_bytes() == b"old lock"
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.lock.json"]


def mutated(change: Callable[[dict[str, Any]], None]) -> str:
    document = json.loads(lock_bytes(full_lock()))
    change(document)
    return json.dumps(document)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set a field named like `files.0.mode` in a lock document."""
    def change(document: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = document
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value
    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = document
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        del target[last]
    return change


VALID = lock_bytes(full_lock())
CORRUPT: list[tuple[str, bytes, str]] = [
    ("empty", b"", "manifest.lock.json is empty"),
    ("blank", b"  \n\n", "manifest.lock.json is empty"),
    ("truncated", VALID[: len(VALID) // 2], "manifest.lock.json is malformed: not JSON"),
    ("not utf-8", b'{"format": 1, "x": "\xff\xfe"}', "manifest.lock.json is malformed: not UTF-8 text (byte 20)"),
    ("yaml", b"format: 1\nbase: {}\n", "manifest.lock.json is malformed: not JSON"),
    ("a string", b'"lock"', "the top level must be an object, not a string"),
    ("null", b"null", "the top level must be an object, not null"),
    ("NaN", mutated(_set("base.config.x", 1)).replace('"x": 1', '"x": NaN').encode(), "NaN is not a JSON number"),
    ("duplicate key", VALID.replace(b'"format": 1,', b'"format": 1, "format": 1,'), "the key 'format' appears twice"),
    ("deep", b"[" * 100_000, "nested too deeply"),
    ("missing key", mutated(_drop("derived")).encode(), "the top level lacks the key 'derived'"),
    ("unknown key", mutated(_set("extra", 1)).encode(), "the top level has the unknown key 'extra'"),
    ("format as text", mutated(_set("format", "1")).encode(), "format must be a whole number ≥ 0, not a string"),
    ("base not an object", mutated(_set("base", [])).encode(), "base must be an object, not a list"),
    ("diff id a number", mutated(_set("base.diff_ids.1", 7)).encode(), "base.diff_ids[1] must be a string, not a number"),
    ("layer size negative", mutated(_set("base.layer_sizes.0", -1)).encode(), "base.layer_sizes[0] must be a whole number ≥ 0"),
    ("config a list", mutated(_set("base.config", [])).encode(), "base.config must be an object, not a list"),
    ("infinite number in config", mutated(_set("base.config.x", 1)).replace('"x": 1', '"x": 1e400').encode(),
     "base.config holds a number that is not finite"),
    ("repo digest a number", mutated(_set("base.repo_digest", 5)).encode(), "base.repo_digest must be a string or null, not a number"),
    ("patches an object", mutated(_set("patches", {})).encode(), "patches must be a list, not an object"),
    ("patch change unknown", mutated(_set("patches.0.files.0.change", "delete")).encode(),
     "patches[0].files[0].change must be 'modify' or 'create', not 'delete'"),
    ("patch path escapes", mutated(_set("patches.0.files.0.path", "../etc/passwd")).encode(),
     "patches[0].files[0].path must be a relative path without '..'"),
    ("file mode as text", mutated(_set("files.0.mode", "420")).encode(), "files[0].mode must be a whole number ≥ 0 and ≤ 4095, not a string"),
    ("file mode a boolean", mutated(_set("files.0.mode", True)).encode(), "files[0].mode must be a whole number ≥ 0 and ≤ 4095, not a boolean"),
    ("file uid negative", mutated(_set("files.1.uid", -5)).encode(), "files[1].uid must be a whole number ≥ 0"),
    ("file path absolute", mutated(_set("files.0.path", "/etc/passwd")).encode(), "files[0].path must be a relative path without '..'"),
    ("stale bytecode a string", mutated(_set("files.0.stale_bytecode", "x.pyc")).encode(), "files[0].stale_bytecode must be a list, not a string"),
    ("dir mtime a float", mutated(_set("dirs.0.mtime", 1.5)).encode(), "dirs[0].mtime must be a whole number ≥ 0"),
    ("new dir null", mutated(_set("new_dirs.0", None)).encode(), "new_dirs[0] must be a string, not null"),
    ("derived not an object", mutated(_set("derived", [])).encode(), "derived must be an object, not a list"),
    ("derived image id missing", mutated(_drop("derived.image_id")).encode(), "derived lacks the key 'image_id'"),
]


@pytest.mark.parametrize("data,fragment", [(data, fragment) for _, data, fragment in CORRUPT], ids=[name for name, _, _ in CORRUPT])
def test_a_corrupt_lock_is_a_one_line_lock_error_naming_the_file_and_the_fix(data: bytes, fragment: str, tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    manifest.lock_path.write_bytes(data)
    with pytest.raises(LockError) as caught:
        read_lock(manifest)
    text = caught.value.one_line()
    assert caught.value.exit_code == 4
    assert fragment in text, text
    assert text.startswith("manifest.lock.json ")
    assert text.endswith("fix: restore it from version control, or delete it and run python build.py lock")
    assert "\n" not in text


def test_a_lock_that_is_a_folder_cannot_be_read(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    manifest.lock_path.mkdir()
    with pytest.raises(LockError, match="manifest.lock.json cannot be read \\(Is a directory\\)"):
        read_lock(manifest)


def test_a_foreign_format_is_named_before_its_fields_are_checked(tmp_path: Path) -> None:
    manifest = tiny_manifest(tmp_path)
    manifest.lock_path.write_text('{"format": 4, "shape": "new"}')
    with pytest.raises(LockError, match="manifest.lock.json has format 4, this kvbake writes 3"):
        read_lock(manifest)


def test_lock_from_dict_names_its_source_without_a_file() -> None:
    document = lock_to_dict(full_lock())
    document["files"] = None
    with pytest.raises(LockError) as caught:
        lock_from_dict(document)
    assert caught.value.exit_code == 4
    assert caught.value.message.startswith("the lock ") and "files" in caught.value.message and "null" in caught.value.message


def test_lock_from_dict_refuses_text_that_cannot_be_written_back() -> None:
    document = json.loads(lock_bytes(full_lock()))
    document["donor_url"] = "\ud800"
    with pytest.raises(LockError, match="donor_url is not valid Unicode text"):
        lock_from_dict(document)


def test_the_cli_reports_a_corrupt_lock_in_one_line_with_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    manifest = tiny_manifest(tmp_path)
    manifest.lock_path.write_bytes(VALID[:100])
    assert main(["plan", "--manifest", str(manifest.path)]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error (lock): manifest.lock.json is malformed: not JSON"), err


def test_lock_refuses_a_previous_lock_whose_epoch_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    manifest = tiny_manifest(tmp_path)
    manifest.lock_path.write_text('{"source_date_epoch": "yesterday"}')
    assert main(["lock", "--manifest", str(manifest.path), "--host", f"unix://{tmp_path}/no.sock"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "manifest.lock.json is malformed: source_date_epoch must be a whole number ≥ 0, not a string" in err
    assert "or set SOURCE_DATE_EPOCH, or delete manifest.lock.json to start a new epoch" in err


@pytest.mark.parametrize("data", [b"", b"\xff", b"[1]"])
def test_lock_refuses_an_empty_binary_or_ill_shaped_previous_lock(data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    manifest = tiny_manifest(tmp_path)
    manifest.lock_path.write_bytes(data)
    assert main(["lock", "--manifest", str(manifest.path), "--host", f"unix://{tmp_path}/no.sock"]) == 4
    assert capsys.readouterr().err.startswith("error (lock): manifest.lock.json is ")


def test_lock_refuses_a_source_date_epoch_that_is_not_digits(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "2024-01-01")
    manifest = tiny_manifest(tmp_path)
    assert main(["lock", "--manifest", str(manifest.path), "--host", f"unix://{tmp_path}/no.sock"]) == 4
    assert "SOURCE_DATE_EPOCH='2024-01-01' is not a whole number of seconds" in capsys.readouterr().err


def test_a_second_lock_run_on_the_same_manifest_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    manifest = tiny_manifest(tmp_path)
    with exclusive(manifest.path):
        assert main(["lock", "--manifest", str(manifest.path), "--host", f"unix://{tmp_path}/no.sock"]) == 4
    assert "another python build.py lock is running on manifest.yaml" in capsys.readouterr().err


def test_a_format_2_lock_pins_only_the_image_sections(tmp_path: Path) -> None:
    """Format 2 pins the hash of the image sections: a preset, the drafter limit, prose or a comment may change; the
    chain, the switch declarations or the output may not."""
    from kvbake.manifest import load_manifest

    manifest = tiny_manifest(tmp_path)
    write_lock(manifest.lock_path, replace(full_lock(manifest.image_sha256), format=2))
    text = manifest.path.read_text()
    runtime_edits = [text.replace("presets:", "# a comment\npresets:", 1), text.replace("format: 1", "format: 1\ndescription: edited", 1),
                     text.replace("presets:", "drafter: {max_positions: 999999}\npresets:", 1)]
    for edited in runtime_edits:
        manifest.path.write_text(edited)
        assert read_lock(load_manifest(manifest.path)).manifest_sha256 == manifest.image_sha256
    manifest.path.write_text(text.replace('TINY_SWITCH: {values: ["3"]}', 'TINY_SWITCH: {values: ["3", "4"]}', 1))
    with pytest.raises(LockError) as caught:
        read_lock(load_manifest(manifest.path))
    assert caught.value.exit_code == 4
    assert all(field in caught.value.message for field in ("manifest.lock.json", "drifts", "manifest.yaml", "switches"))
    assert "review the change" in caught.value.fix


def test_a_format_1_lock_still_pins_the_whole_file(tmp_path: Path) -> None:
    from kvbake.manifest import load_manifest

    manifest = tiny_manifest(tmp_path)
    write_lock(manifest.lock_path, full_lock(manifest.sha256))
    assert read_lock(manifest).format == 1
    manifest.path.write_text(manifest.path.read_text() + "# a comment\n")
    with pytest.raises(LockError) as caught:
        read_lock(load_manifest(manifest.path))
    assert caught.value.exit_code == 4
    assert all(field in caught.value.message for field in ("manifest.lock.json", "drifts", "the manifest changed"))
    assert "switches" not in caught.value.message
