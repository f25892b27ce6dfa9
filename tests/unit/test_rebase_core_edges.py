"""The rebase core at its edges: a patch header's bounds, output before a file section, and the regions around a hunk."""

from __future__ import annotations

from kvbake.rebase.core.apply_report import OFFSET, outcome_of, read_apply_report
from kvbake.rebase.core.candidate_patch import patch_header
from kvbake.rebase.core.upstream import overlapping_changes

OLD = "".join(f"line {n}\n" for n in range(1, 21))


def test_a_plus_line_without_its_minus_line_does_not_end_the_header():
    assert patch_header("a\nb\n+++ x\n") == ""
    assert patch_header("intro\n--- x\nbody\n") == ""


def test_a_minus_line_as_the_last_line_ends_nothing():
    assert patch_header("note\n--- last\n") == ""


def test_a_plain_diff_pair_at_the_very_end_ends_a_header_of_several_lines():
    assert patch_header("note\nmore\n--- a/f\n+++ b/f") == "note\nmore\n"


def test_an_offset_named_before_any_file_section_belongs_to_the_empty_path():
    outcomes = read_apply_report("Hunk #1 succeeded at 9 (offset 2 lines).\n")
    assert outcome_of(outcomes, "", 1).status == OFFSET


def test_edits_just_before_and_just_after_the_hunk_do_not_touch_it():
    before = OLD.replace("line 9\n", "line nine\n")
    after = OLD.replace("line 15\n", "line fifteen\n")
    assert overlapping_changes(OLD, before, 10, 5).regions == ()
    assert overlapping_changes(OLD, after, 10, 5).regions == ()


def test_an_insertion_right_before_the_hunk_does_not_touch_it():
    assert overlapping_changes(OLD, OLD.replace("line 10\n", "new\nline 10\n"), 10, 5).regions == ()


def test_a_change_after_an_unrelated_one_is_still_found():
    new = OLD.replace("line 3\n", "line three\n").replace("line 12\n", "line twelve\n")
    assert overlapping_changes(OLD, new, 10, 5).conflicting_lines == (12,)


def test_two_changes_inside_the_hunk_give_both_regions_in_the_diff():
    new = OLD.replace("line 11\n", "line eleven\n").replace("line 13\n", "line thirteen\n")
    found = overlapping_changes(OLD, new, 10, 5)
    assert found.as_diff() == "@@ -11,1 +11,1 @@\n-line 11\n+line eleven\n@@ -13,1 +13,1 @@\n-line 13\n+line thirteen\n"


def test_a_line_added_on_top_of_a_long_run_of_equal_lines_does_not_reach_a_hunk_far_below():
    old = "\n" * 250
    assert overlapping_changes(old, "top\n" + old, 100, 3).regions == ()
