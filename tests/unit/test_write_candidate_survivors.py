"""The candidate folder's report page is UTF-8 whatever the process locale, and shows each hunk as the chain states it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kvbake.rebase import commands
from kvbake.rebase.adapters.rebaser import OldStep, refresh
from kvbake.rebase.core.report import RebaseReport

from test_rebase_refresh import diff

OLD = [f"line {n}" for n in range(1, 11)]
NEW = ["line 1", "line 2", "caf\u00e9 \u2014 na\u00efve", *OLD[3:]]


def text(lines: list[str]) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode("utf-8")


def candidate(tmp_path):
    """Write the candidate of a one-patch chain whose hunk adds a line with non-ASCII characters."""
    patch = diff("f.py", text(OLD), text(NEW))
    path = tmp_path / "patches" / "0001-f.patch"
    path.parent.mkdir(parents=True)
    path.write_bytes(patch)
    manifest = SimpleNamespace(path=tmp_path / "manifest.yaml", chain=[SimpleNamespace(id="0001", file="patches/0001-f.patch", path=path)])
    step = OldStep(manifest.chain[0], {"f.py": text(OLD)}, {"f.py": text(NEW)})
    moved = refresh(step, {"f.py": text(OLD)}, patch)
    report = RebaseReport("manifest.yaml", "old:1", "sha256:" + "a" * 64, "new:1", "sha256:" + "b" * 64, (), (moved.report,))
    commands.write_candidate(manifest, tmp_path / "out", [moved], report)
    return tmp_path / "out"


@pytest.mark.usefixtures("ascii_locale")
def test_the_report_page_is_written_as_utf8_under_an_ascii_locale(tmp_path):
    out = candidate(tmp_path)
    page = (out / "report.html").read_bytes().decode("utf-8")
    assert "+caf\u00e9 \u2014 na\u00efve\n" in page and 'encoding="UTF-8"' in page
    assert json.loads((out / "rebase.json").read_bytes())["chain"] == ["0001"]


def test_the_report_page_shows_the_hunk_with_its_non_ascii_lines(tmp_path):
    page = (candidate(tmp_path) / "report.html").read_bytes().decode("utf-8")
    assert "<pre>@@ -1,6 +1,6 @@\n line 1\n line 2\n-line 3\n+caf\u00e9 \u2014 na\u00efve\n" in page
