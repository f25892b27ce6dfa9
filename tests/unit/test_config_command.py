"""`config PRESET`, `config --all` and `config --check` on the command line over a copy of the stand-in project."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvbake.cli import main
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.operate import commands

STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
VALIDATED = ["control", "packing-327680"]
EVERY = ["control", "longctx-1048576", "longctx-524288", "packing-327680"]  # the manifest's order


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "standin"
    shutil.copytree(STANDIN, root, ignore=shutil.ignore_patterns(".kvbake"))
    return root


def config(project: Path, *argv: str) -> int:
    return main(["config", *argv, "--manifest", str(project / "manifest.yaml")])


def lock_sha(project: Path) -> str:
    return read_lock(load_manifest(project / "manifest.yaml")).core_sha256()


def test_one_preset_is_written_into_the_folder_given(project: Path, capsys) -> None:
    assert config(project, "control", "--out", str(project / "out")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(p.name for p in (project / "out" / "control").iterdir()) == ["config.json", "launcher.args", "ranks.env"]
    assert [p.name for p in (project / "out").iterdir()] == ["control"]
    preset = load_manifest(project / "manifest.yaml").presets["control"]
    assert lines[0] == (f"wrote out/control/ (ranks.env, launcher.args, config.json): validated, max-model-len {preset.max_model_len}, "
                        f"{len(preset.switches)} switches")
    assert lines[1].endswith(f"; lock: {lock_sha(project)}") and lines[1].startswith("drafter limit")
    assert (project / "out" / "control" / "ranks.env").read_text() == (project / "configs" / "control" / "ranks.env").read_text()


def test_the_json_names_the_folder_the_presets_and_the_lock(project: Path, capsys) -> None:
    assert config(project, "packing-327680", "--out", str(project / "cfg"), "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"out": "cfg", "presets": ["packing-327680"], "lock_sha256": lock_sha(project)}


def test_an_unlocked_manifest_says_so(project: Path, capsys) -> None:
    (project / "manifest.lock.json").unlink()
    assert config(project, "control", "--out", str(project / "out"), "--json") == 0
    assert json.loads(capsys.readouterr().out)["lock_sha256"] is None
    assert config(project, "control", "--out", str(project / "out")) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("; lock: unlocked")


def test_the_default_folder_is_configs_beside_the_manifest(project: Path, capsys) -> None:
    shutil.rmtree(project / "configs")
    assert config(project, "--all", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["out"] == "configs" and data["presets"] == EVERY
    assert sorted(p.name for p in (project / "configs").iterdir()) == sorted(EVERY)
    assert config(project, "--check") == 0
    assert capsys.readouterr().out.strip() == f"configs: {', '.join(EVERY)} match the manifest and lock"


def test_a_folder_outside_the_project_is_shown_whole(project: Path, tmp_path: Path, capsys) -> None:
    outside = tmp_path / "elsewhere"
    assert config(project, "control", "--out", str(outside), "--json") == 0
    assert json.loads(capsys.readouterr().out)["out"] == str(outside)


def test_check_of_the_committed_configuration_passes_and_lists_the_presets(project: Path, capsys) -> None:
    assert config(project, "--check", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data == {"ok": True, "out": "configs", "presets": EVERY}


def test_check_regenerates_held_presets_only_when_present_or_with_all(project: Path, capsys) -> None:
    shutil.rmtree(project / "configs" / "longctx-524288")
    shutil.rmtree(project / "configs" / "longctx-1048576")
    assert config(project, "--check", "--json") == 0
    assert json.loads(capsys.readouterr().out)["presets"] == VALIDATED
    assert config(project, "--check", "--all") == 7
    assert "missing: longctx-1048576/config.json" in capsys.readouterr().err


def test_check_names_a_drifted_file(project: Path, capsys) -> None:
    env = project / "configs" / "control" / "ranks.env"
    env.write_text(env.read_text() + "EXTRA=1\n")
    assert config(project, "--check") == 7
    err = capsys.readouterr().err
    assert "configs differs from the generated configuration (drifted: control/ranks.env)" in err
    assert "fix: regenerate with python build.py config --all (or config PRESET)" in err


def test_check_names_every_drifted_missing_and_extra_file_in_that_order(project: Path, capsys) -> None:
    env = project / "configs" / "control" / "ranks.env"
    env.write_text(env.read_text() + "EXTRA=1\n")
    args = project / "configs" / "packing-327680" / "launcher.args"
    args.write_text(args.read_text() + "--extra\n")
    (project / "configs" / "control" / "launcher.args").unlink()
    (project / "configs" / "control" / "notes.txt").write_text("mine")
    assert config(project, "--check") == 7
    err = capsys.readouterr().err
    assert ("(drifted: control/ranks.env, packing-327680/launcher.args; missing: control/launcher.args; "
            "extra: control/notes.txt)") in err


def test_check_of_an_empty_folder_is_one_unwritten_line(project: Path, capsys) -> None:
    shutil.rmtree(project / "configs")
    (project / "configs").mkdir()
    assert config(project, "--check") == 7
    err = capsys.readouterr().err
    assert "configs holds none of the configuration files" in err and "missing:" not in err


def test_a_file_as_the_out_folder_is_refused(project: Path, capsys) -> None:
    (project / "configs.txt").write_text("x")
    assert config(project, "control", "--out", str(project / "configs.txt")) == 2
    assert "--out configs.txt is not a folder" in capsys.readouterr().err


def test_a_folder_that_cannot_be_written_is_a_resource_error(project: Path, monkeypatch, capsys) -> None:
    import kvbake.atomicfile as atomicfile

    def refuse(path: Path, data: bytes, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(atomicfile, "write_atomic", refuse)
    assert config(project, "control", "--out", str(project / "out")) == 10
    err = capsys.readouterr().err
    assert "cannot write " in err and "Permission denied" in err and "--out folder this user can write" in err


def test_read_tree_reads_every_file_below_the_folder_by_relative_path(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c.txt").write_text("deep")
    (tmp_path / "top").write_bytes(b"\xff")
    assert commands._read_tree(tmp_path) == {"a/b/c.txt": "deep", "top": "\ufffd"}
    assert commands._read_tree(tmp_path / "absent") == {}


def test_shown_is_relative_inside_the_project_and_whole_outside(tmp_path: Path) -> None:
    manifest = SimpleNamespace(root=tmp_path / "p")
    assert commands._shown(manifest, tmp_path / "p" / "x" / "y") == "x/y"
    assert commands._shown(manifest, tmp_path / "q") == str(tmp_path / "q")


def test_the_preset_folders_of_a_tree_are_its_first_path_parts() -> None:
    from kvbake.serve.core.runtime_config import preset_names_in

    tree = {"b/ranks.env": "", "a/sub/deep/file": "", "a/config.json": "", "README.md": ""}
    assert preset_names_in(tree) == ("a", "b")


def test_the_tree_is_read_as_utf8_whatever_the_locale(tmp_path: Path) -> None:
    import locale

    (tmp_path / "note.txt").write_bytes("café\n".encode())
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        tree = commands._read_tree(tmp_path)
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
    assert tree == {"note.txt": "café\n"}
