"""The pure core of rebase: git apply's per-hunk words read, the upstream change a hunk meets, the refreshed patch's
header, conflict markers, and the report's counts and statuses."""

from __future__ import annotations

import pytest

from kvbake.rebase.core.apply_report import CLEAN, OFFSET, REJECTED, HunkApplied, outcome_of, read_apply_report
from kvbake.rebase.core.candidate_patch import conflict_marker_lines, patch_header, refreshed_patch
from kvbake.rebase.core.report import FileState, HunkReport, PatchReport, RebaseReport, report_json, report_markdown
from kvbake.rebase.core.upstream import overlapping_changes

GIT_OUTPUT = """Checking patch a/x.py...
Hunk #1 succeeded at 5 (offset 3 lines).
error: while searching for:
27
error: patch failed: a/x.py:27
Checking patch b.py...
Hunk #2 succeeded at 40 (offset -1 line).
Applying patch a/x.py with 1 reject...
Hunk #1 applied cleanly.
Rejected hunk #2.
Applied patch b.py cleanly.
"""


def test_git_apply_output_gives_each_hunk_its_outcome():
    outcomes = read_apply_report(GIT_OUTPUT)
    assert outcomes == {("a/x.py", 1): HunkApplied(OFFSET, 3, 5), ("a/x.py", 2): HunkApplied(REJECTED),
                        ("b.py", 2): HunkApplied(OFFSET, -1, 40)}
    assert outcome_of(outcomes, "b.py", 1) == HunkApplied(CLEAN), "a hunk git did not name applied as stated"


def test_applied_cleanly_does_not_hide_an_offset_seen_while_checking():
    assert read_apply_report("Checking patch f...\nHunk #1 succeeded at 9 (offset 2 lines).\nApplying patch f with 1 reject...\n"
                             "Hunk #1 applied cleanly.\nRejected hunk #2.\n")[("f", 1)].status == OFFSET


OLD = "".join(f"line {n}\n" for n in range(1, 21))


def test_an_upstream_edit_inside_the_hunk_is_named_with_its_old_line():
    new = OLD.replace("line 12\n", "line twelve\n")
    found = overlapping_changes(OLD, new, 10, 5)
    assert found.conflicting_lines == (12,)
    assert found.as_diff() == "@@ -12,1 +12,1 @@\n-line 12\n+line twelve\n"


def test_an_upstream_edit_outside_the_hunk_is_not_its_concern():
    new = OLD.replace("line 3\n", "line three\n").replace("line 18\n", "line eighteen\n")
    assert overlapping_changes(OLD, new, 10, 5).regions == ()


def test_an_insertion_between_the_hunk_lines_overlaps_and_one_at_its_edge_does_not():
    inside = OLD.replace("line 12\n", "line 12\nnew\n")
    assert [r.new_lines for r in overlapping_changes(OLD, inside, 10, 5).regions] == [("new",)]
    after = OLD.replace("line 14\n", "line 14\nnew\n")
    assert overlapping_changes(OLD, after, 10, 5).regions == ()


def test_a_deletion_that_starts_before_the_hunk_names_only_the_hunk_lines_it_removes():
    new = OLD.replace("line 8\nline 9\nline 10\nline 11\n", "")
    assert overlapping_changes(OLD, new, 10, 5).conflicting_lines == (10, 11)


FORMAT_PATCH = "From 0 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\nbody\n---\n f | 1 +\n\ndiff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"


def test_the_refreshed_patch_keeps_the_header_and_takes_the_new_body():
    assert patch_header(FORMAT_PATCH) == "From 0 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\nbody\n---\n f | 1 +\n\n"
    assert refreshed_patch(FORMAT_PATCH, "diff --git a/f b/f\nNEW\n").endswith("\n\ndiff --git a/f b/f\nNEW\n")
    assert patch_header("note\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n") == "note\n", "a plain diff's header ends at its --- / +++ pair"
    assert patch_header("--- not a section\nbody\n") == ""


def test_conflict_markers_are_found_in_files_and_on_patch_lines_only_at_line_start():
    text = "a\n+<<<<<<< new base\n+x\n+=======\n+y\n+>>>>>>> old patched\nb\n"
    assert conflict_marker_lines(text) == [2, 4, 6]
    assert conflict_marker_lines("<<<<<<< ours\n=======\n>>>>>>> theirs\n") == [1, 2, 3]
    assert conflict_marker_lines("x = '<<<<<<< not at start'\n========\n") == []


def test_file_states_follow_the_change_and_the_two_hashes():
    assert FileState("m", "modify", "h1", "h1").state == "unchanged"
    assert FileState("m", "modify", "h1", "h2").state == "changed"
    assert FileState("m", "modify", "h1", None).state == "gone"
    assert FileState("c", "create", None, None).state == "absent"
    assert FileState("c", "create", None, "h").state == "appeared"


def test_a_patch_takes_its_worst_hunk_and_the_report_counts_every_hunk():
    hunks = (HunkReport("f", 1, "@@", "clean"), HunkReport("f", 2, "@@", "merged"), HunkReport("g", 1, "@@", "offset", 2, 9))
    patch = PatchReport("0001", "p/0001.patch", hunks)
    conflicted = PatchReport("0002", "p/0002.patch", (HunkReport("g", 1, "@@", "conflict", reason="both sides change these lines"),))
    report = RebaseReport("manifest.yaml", "old:1", "sha256:a", "new:2", "sha256:b", (), (patch, conflicted))
    assert patch.status == "merged" and conflicted.status == "conflict"
    assert report.counts() == {"clean": 1, "offset": 1, "merged": 1, "conflict": 1} and report.needs_person == ("0002",)
    document = report_json(report)
    assert document["patches"][0]["hunks"][2] == {"path": "g", "number": 1, "header": "@@", "status": "offset", "offset": 2, "line": 9}
    assert "| `g` | 1 | offset | at line 9 (+2 lines) |" in report_markdown(report)
    assert "needs a person: 0002" in report_markdown(report)


def test_the_switch_names_a_rebase_moves_are_the_new_reads_and_the_declared_ones_no_longer_read():
    from kvbake.rebase.core.switch_names import names_read, switch_changes

    old = {"vllm/a.py": b'import os\nX = os.environ.get("VLLM_OLD_ONE")\nY = os.getenv("VLLM_KEPT")\n', "vllm/gone.py": None}
    new = {"vllm/a.py": b'import os\nY = os.getenv("VLLM_KEPT")\nZ = os.environ["VLLM_NEW_ONE"]\nW = os.getenv("HOME")\n'}
    assert names_read(new) == {"VLLM_KEPT", "VLLM_NEW_ONE", "HOME"}
    assert switch_changes(old, new, ["VLLM_OLD_ONE", "VLLM_KEPT", "VLLM_NEVER_READ"]) == (("HOME", "VLLM_NEW_ONE"), ("VLLM_OLD_ONE",))


MANIFEST = """format: 1
base:
  image: "kvbake-standin/vllm-base:0.33.0"   # the locally built stand-in
  source_root: /usr/lib/py
output:
  image: not-the-base
"""


def test_the_manifest_points_at_the_new_base_with_its_quotes_and_comment_kept():
    from kvbake.rebase.core.manifest_edit import text_diff, with_base_image

    edited = with_base_image(MANIFEST, "kvbake-standin/vllm-base:0.33.0", "kvbake-standin/vllm-base:0.34.0")
    assert edited == MANIFEST.replace("0.33.0", "0.34.0")
    assert text_diff("manifest.yaml", MANIFEST, edited) == (
        "--- a/manifest.yaml\n+++ b/manifest.yaml\n@@ -1,6 +1,6 @@\n format: 1\n base:\n"
        '-  image: "kvbake-standin/vllm-base:0.33.0"   # the locally built stand-in\n'
        '+  image: "kvbake-standin/vllm-base:0.34.0"   # the locally built stand-in\n'
        "   source_root: /usr/lib/py\n output:\n   image: not-the-base\n")


def test_a_base_given_on_no_line_or_on_two_is_left_to_a_person():
    from kvbake.errors import RebaseError
    from kvbake.rebase.core.manifest_edit import with_base_image

    for text in (MANIFEST.replace('  image: "kvbake-standin/vllm-base:0.33.0"', "  image: other:1"),
                 MANIFEST + "  other:\n    image: kvbake-standin/vllm-base:0.33.0\n"):
        with pytest.raises(RebaseError) as caught:
            with_base_image(text, "kvbake-standin/vllm-base:0.33.0", "new:1")
        assert caught.value.exit_code == 18 and "lock --rebase-base" in caught.value.fix
