"""The rebase report in full (JSON fields, Markdown lines, upstream diffs) and the manifest edit's refusal."""

from __future__ import annotations

import pytest

from kvbake.errors import RebaseError
from kvbake.rebase.core.apply_report import read_apply_report
from kvbake.rebase.core.manifest_edit import with_base_image
from kvbake.rebase.core.report import FileState, HunkReport, PatchedFile, PatchReport, RebaseReport, report_json, report_markdown
from kvbake.rebase.core.upstream import UpstreamOverlap, UpstreamRegion, overlapping_changes

from message_words import says

UPSTREAM = UpstreamOverlap((UpstreamRegion(12, ("old twelve",), 12, ("new twelve", "added")),), (12,))
CONFLICTED = HunkReport("vllm/x.py", 2, "@@ -10,5 +10,6 @@", "conflict", upstream=UPSTREAM, reason="both sides change these lines")
MERGED = HunkReport("vllm/x.py", 3, "@@ -40,3 +41,3 @@", "merged", upstream=UpstreamOverlap((), ()))
REPORT = RebaseReport(
    "manifest.yaml", "base:1", "sha256:" + "a" * 64, "base:2", "sha256:" + "b" * 64,
    (FileState("vllm/x.py", "modify", "h1", "h2"), FileState("vllm/new.py", "create", None, None)),
    (PatchReport("0051", "patches/0051.patch", (HunkReport("vllm/x.py", 1, "@@ -1,3 +1,4 @@", "clean"), CONFLICTED, MERGED),
                 (PatchedFile("vllm/x.py", "h2", None),)),),
    ("VLLM_NEW",), ("VLLM_OLD", "VLLM_GONE"))


def test_the_json_report_holds_every_field():
    assert report_json(REPORT) == {
        "manifest": "manifest.yaml",
        "from": {"image": "base:1", "config_digest": "sha256:" + "a" * 64},
        "to": {"image": "base:2", "config_digest": "sha256:" + "b" * 64},
        "files": [{"path": "vllm/x.py", "change": "modify", "state": "changed", "before": "h1", "now": "h2"},
                  {"path": "vllm/new.py", "change": "create", "state": "absent", "before": None, "now": None}],
        "patches": [{"id": "0051", "file": "patches/0051.patch", "status": "conflict",
                     "files": [{"path": "vllm/x.py", "before": "h2", "after": None}],
                     "hunks": [{"path": "vllm/x.py", "number": 1, "header": "@@ -1,3 +1,4 @@", "status": "clean"},
                               {"path": "vllm/x.py", "number": 2, "header": "@@ -10,5 +10,6 @@", "status": "conflict",
                                "reason": "both sides change these lines",
                                "upstream": {"diff": "@@ -12,1 +12,2 @@\n-old twelve\n+new twelve\n+added\n", "conflicting_lines": [12]}},
                               {"path": "vllm/x.py", "number": 3, "header": "@@ -40,3 +41,3 @@", "status": "merged",
                                "upstream": {"diff": "", "conflicting_lines": []}}]}],
        "counts": {"clean": 1, "offset": 0, "merged": 1, "conflict": 1},
        "needs_person": ["0051"], "new_switches": ["VLLM_NEW"], "unread_switches": ["VLLM_OLD", "VLLM_GONE"],
    }


def test_the_markdown_report_names_both_bases_the_counts_the_files_and_the_switches():
    lines = report_markdown(REPORT).splitlines()
    assert lines[:6] == ["# Rebase of manifest.yaml", "", f"- from `base:1` (config `sha256:{'a' * 64}`)", f"- to `base:2` (config `sha256:{'b' * 64}`)",
                         "- hunks: 1 clean, 0 offset, 1 merged, 1 conflicted", "- needs a person: 0051"]
    assert "| `vllm/x.py` | modify | changed |" in lines and "| `vllm/new.py` | create | absent |" in lines
    new_line = next(line for line in lines if line.startswith("Environment names"))
    assert new_line.endswith(": `VLLM_NEW`") and says(new_line, "lock")
    unread_line = next(line for line in lines if line.startswith("Declared switches"))
    assert unread_line.endswith(": `VLLM_OLD`, `VLLM_GONE`")
    assert "## 0051: conflict" in lines and "`patches/0051.patch`" in lines


def test_each_hunk_with_an_upstream_change_shows_it_as_a_diff_and_one_without_regions_shows_nothing():
    text = report_markdown(REPORT)
    assert "| `vllm/x.py` | 2 | conflict | both sides change these lines |" in text and "| `vllm/x.py` | 3 | merged |  |" in text
    assert ("Hunk 2 of `vllm/x.py` (`@@ -10,5 +10,6 @@`) meets this upstream change (its old lines 12):\n\n```diff\n"
            "@@ -12,1 +12,2 @@\n-old twelve\n+new twelve\n+added\n```\n") in text
    assert "Hunk 3 of" not in text


def test_an_upstream_change_that_touches_no_hunk_line_is_shown_without_line_numbers():
    quiet = HunkReport("f", 1, "@@", "merged", upstream=UpstreamOverlap((UpstreamRegion(3, (), 3, ("inserted",)),), ()))
    report = RebaseReport("m", "a", "sha256:1", "b", "sha256:2", (), (PatchReport("0001", "p", (quiet,)),))
    assert "meets this upstream change:\n" in report_markdown(report)


def test_a_report_without_switch_changes_or_people_says_none_and_lists_no_switches():
    report = RebaseReport("m", "a", "sha256:1", "b", "sha256:2", (), (PatchReport("0001", "p", (HunkReport("f", 1, "@@", "offset", -3, 7),)),))
    text = report_markdown(report)
    assert "- needs a person: none" in text and "Environment names" not in text and "Declared switches" not in text
    assert "| `f` | 1 | offset | at line 7 (-3 lines) |" in text
    assert report_json(report)["patches"][0]["hunks"][0] == {"path": "f", "number": 1, "header": "@@", "status": "offset", "offset": -3, "line": 7}


def test_an_insertion_just_after_the_first_hunk_line_counts_the_lines_around_it():
    old = "".join(f"line {n}\n" for n in range(1, 11))
    new = old.replace("line 5\n", "line 5\ninserted\n")
    found = overlapping_changes(old, new, 4, 4)
    assert found.conflicting_lines == (5, 6) and found.regions[0].as_diff() == "@@ -6,0 +6,1 @@\n+inserted\n"


def test_git_apply_lines_with_surrounding_space_are_read():
    assert read_apply_report("  Checking patch f.py...  \n  Rejected hunk #1.  \n") == {("f.py", 1): read_apply_report("Checking patch f.py...\nRejected hunk #1.\n")[("f.py", 1)]}


def test_an_edit_that_would_not_give_the_new_base_is_refused():
    text = "base:\n  source_root: /src\nside:\n  image: old:1\n"
    with pytest.raises(RebaseError) as caught:
        with_base_image(text, "old:1", "new:1")
    assert caught.value.exit_code == 18 and says(caught.value.message, "did not give a manifest whose base is new:1")
    assert caught.value.fix.startswith("set base.image to the new base yourself")


def test_the_markdown_report_is_the_whole_document():
    two = RebaseReport("manifest.yaml", "base:1", "sha256:a", "base:2", "sha256:b", (FileState("vllm/x.py", "modify", "h1", "h2"),),
                       (PatchReport("0051", "patches/0051.patch", (HunkReport("vllm/x.py", 1, "@@ -10,5 +10,6 @@", "conflict", reason="r",
                                                                              upstream=UpstreamOverlap((UpstreamRegion(11, ("a", "b"), 11, ()),), (11, 12))),)),
                        PatchReport("0053", "patches/0053.patch", (HunkReport("vllm/x.py", 1, "@@", "conflict"),))),
                       ("VLLM_N1", "VLLM_N2"), ("VLLM_O1",))
    assert report_markdown(two) == (
        "# Rebase of manifest.yaml\n\n- from `base:1` (config `sha256:a`)\n- to `base:2` (config `sha256:b`)\n"
        "- hunks: 0 clean, 0 offset, 0 merged, 2 conflicted\n- needs a person: 0051, 0053\n\n"
        "## Files on the new base\n\n| file | change | state |\n|---|---|---|\n| `vllm/x.py` | modify | changed |\n\n"
        "Environment names the chain's files read on the new base and did not before (review them; `lock` refuses one the chain's own "
        "lines read without a declaration): `VLLM_N1`, `VLLM_N2`\n\n"
        "Declared switches the chain's files no longer read on the new base (`lock` refuses a declared switch nothing reads): `VLLM_O1`\n\n"
        "## 0051: conflict\n\n`patches/0051.patch`\n\n| file | hunk | status | detail |\n|---|---:|---|---|\n| `vllm/x.py` | 1 | conflict | r |\n\n"
        "Hunk 1 of `vllm/x.py` (`@@ -10,5 +10,6 @@`) meets this upstream change (its old lines 11, 12):\n\n```diff\n@@ -11,2 +11,0 @@\n-a\n-b\n```\n\n"
        "## 0053: conflict\n\n`patches/0053.patch`\n\n| file | hunk | status | detail |\n|---|---:|---|---|\n| `vllm/x.py` | 1 | conflict |  |\n")


def test_the_names_read_are_every_files_and_undecodable_bytes_do_not_stop_the_scan():
    from kvbake.rebase.core.switch_names import names_read

    files = {"a.py": b'import os\nA = os.environ.get("VLLM_A")\n', "b.py": b'import os\nB = os.getenv("VLLM_B")  # \xff\xfe\n', "c.py": None}
    assert names_read(files) == {"VLLM_A", "VLLM_B"}


def test_an_upstream_diff_keeps_its_last_lines_own_characters():
    for last in ("ends in X", "ends in space "):
        hunk = HunkReport("f", 1, "@@", "merged", upstream=UpstreamOverlap((UpstreamRegion(1, ("old",), 1, (last,)),), (1,)))
        report = RebaseReport("m", "a", "sha256:1", "b", "sha256:2", (), (PatchReport("0001", "p", (hunk,)),))
        assert f"\n+{last}\n```\n" in report_markdown(report)
