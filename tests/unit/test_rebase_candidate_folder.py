"""The candidate folder keeps the chain's file names, folders below patches/ included."""

from __future__ import annotations

import json
from types import SimpleNamespace

from kvbake.rebase import commands
from kvbake.rebase.adapters.rebaser import refresh
from kvbake.rebase.core.report import RebaseReport

from test_rebase_refresh import OLD, PATCH, STEP, text


def test_a_patch_in_a_nested_folder_is_written_under_the_same_nested_name(tmp_path):
    nested = tmp_path / "patches" / "team" / "fixes" / "0001-f.patch"
    nested.parent.mkdir(parents=True)
    nested.write_bytes(PATCH)
    manifest = SimpleNamespace(path=tmp_path / "manifest.yaml",
                               chain=[SimpleNamespace(id="0001", file="patches/team/fixes/0001-f.patch", path=nested)])
    moved = refresh(STEP, {"f.py": text(OLD)}, PATCH)
    report = RebaseReport("manifest.yaml", "old:1", "sha256:" + "a" * 64, "new:1", "sha256:" + "b" * 64, (), (moved.report,))
    commands.write_candidate(manifest, tmp_path / "out", [moved], report)
    written = (tmp_path / "out" / "patches" / "team" / "fixes" / "0001-f.patch").read_text()
    assert "+line three" in written and "+line fifteen" in written
    assert json.loads((tmp_path / "out" / "rebase.json").read_text())["chain"] == ["0001"]
