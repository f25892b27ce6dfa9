"""The served overlay's edges: a container's name, paths under the source root, each proof difference's diff, the
unified diff's headers, line ends, undecodable bytes and length limit, the differences file, and a record's refusal."""

from __future__ import annotations

import pytest

from kvbake.bake.core.served_overlay import (Difference, Proof, ServedFile, ServedOverlay, container_name, differences_text, prove,
                                             record_dict, record_from_dict, relative_to_root, unified)
from kvbake.digests import sha256_hex
from kvbake.errors import IntegrityError

ROOT = "/usr/lib/py"
LONG_ID = "0123456789abcdef0123"


@pytest.mark.parametrize(("container", "name"), [
    ({"Name": "/serve", "Id": LONG_ID}, "serve"),
    ({"Name": "/Xserve", "Id": LONG_ID}, "Xserve"),
    ({"Id": LONG_ID}, LONG_ID[:12]),
    ({"Name": "", "Id": LONG_ID}, LONG_ID[:12]),
    ({}, ""),
])
def test_a_container_is_named_by_its_name_without_the_slash_or_else_by_its_short_id(container, name):
    assert container_name(container) == name


@pytest.mark.parametrize(("path", "root"), [
    ("/srv/pyX/vllm/a.py", "/srv/pyX"),
    ("/srv/py /vllm/a.py", "/srv/py "),
    ("/srv/py/vllm/a.py", "/srv/py/"),
])
def test_a_path_under_the_source_root_is_named_relative_to_that_exact_folder(path, root):
    assert relative_to_root(path, root) == "vllm/a.py"


def served_of(**files: bytes) -> ServedOverlay:
    return ServedOverlay(ROOT, "sha256:i", tuple(ServedFile(p, sha256_hex(d), None, "mounted from /x") for p, d in sorted(files.items())))


def headers(difference: Difference) -> tuple[str, ...]:
    return difference.diff[:2]


def test_a_served_file_the_chain_does_not_touch_is_diffed_from_the_served_bytes_to_the_images():
    proof = prove(served_of(**{"n.py": b"served\n"}), {"n.py": b"served\n"}, {}, {}, {"n.py": b"image\n"})
    (difference,) = proof.differences
    assert headers(difference) == ("--- served/n.py\n", "+++ chain/n.py\n")
    assert "-served\n" in difference.diff and "+image\n" in difference.diff


def test_a_chain_result_other_than_the_served_file_is_diffed_under_the_files_path():
    proof = prove(served_of(**{"a.py": b"served\n"}), {"a.py": b"served\n"}, {"a.py": b"chain\n"}, {"a.py": None})
    (difference,) = proof.differences
    assert headers(difference) == ("--- served/a.py\n", "+++ chain/a.py\n")
    assert "-served\n" in difference.diff and "+chain\n" in difference.diff


def test_a_file_the_chain_creates_but_the_serve_does_not_run_is_diffed_from_nothing():
    proof = prove(served_of(), {}, {"d.py": b"created\n"}, {"d.py": None})
    (difference,) = proof.differences
    assert headers(difference) == ("--- served/d.py\n", "+++ chain/d.py\n")
    assert "+created\n" in difference.diff and not any(line.startswith("-") and not line.startswith("---") for line in difference.diff)


def test_a_file_the_chain_changes_that_the_serve_runs_as_the_image_holds_it_is_diffed_from_the_images_bytes():
    proof = prove(served_of(), {}, {"c.py": b"changed\n"}, {"c.py": sha256_hex(b"image\n")}, {"c.py": b"image\n"})
    (difference,) = proof.differences
    assert headers(difference) == ("--- served/c.py\n", "+++ chain/c.py\n")
    assert "-image\n" in difference.diff and "+changed\n" in difference.diff


def test_a_chain_file_whose_result_is_the_images_own_file_is_proven_equal_by_path():
    proof = prove(served_of(), {}, {"c.py": b"image\n"}, {"c.py": sha256_hex(b"image\n")})
    assert proof.equal == ("c.py",) and not proof.differences


def test_the_proof_line_lists_every_differing_path_comma_separated():
    proof = Proof(("e.py",), (Difference("a.py", "why", ()), Difference("b.py", "why", ())))
    assert "(a.py, b.py)" in proof.line() and "2 of 3" in proof.line()


def test_the_differences_file_holds_each_path_and_reason_then_its_diff_lines_separated_by_a_blank_line():
    proof = Proof((), (Difference("a.py", "r1", ("--- served/a.py\n", "+++ chain/a.py\n")), Difference("b.py", "r2", ("-x\n",))))
    assert differences_text(proof).splitlines() == ["# a.py: r1", "--- served/a.py", "+++ chain/a.py", "", "# b.py: r2", "-x"]


def test_a_unified_diff_runs_from_the_served_file_to_the_chains_and_has_no_trailer_when_short():
    assert unified("p.py", b"a\n", b"b\n") == ("--- served/p.py\n", "+++ chain/p.py\n", "@@ -1 +1 @@\n", "-a\n", "+b\n")


def test_a_missing_final_newline_is_a_difference_and_every_diff_line_ends_in_one():
    assert unified("p.py", b"a\n", b"a")[-2:] == ("-a\n", "+a\n")


def test_bytes_that_are_not_utf8_are_shown_escaped():
    assert "-\\xff\n" in unified("p.py", b"\xff\n", b"ok\n")


def test_a_diff_over_200_lines_keeps_200_and_counts_the_rest():
    diff = unified("p.py", "".join(f"{n}\n" for n in range(300)).encode(), b"")
    assert len(diff) == 201 and diff[199] == "-196\n"
    assert diff[-1].startswith("... ") and "103" in diff[-1]


def test_a_diff_of_exactly_the_limit_is_kept_whole():
    assert len(unified("p.py", b"a\n", b"b\n", limit=5)) == 5


def test_a_record_keeps_each_files_image_hash():
    overlay = ServedOverlay(ROOT, "sha256:i", (ServedFile("a.py", sha256_hex(b"1"), sha256_hex(b"0"), "mounted from /x"),))
    assert record_from_dict(record_dict(overlay, ["a"]), "r").files[0].base_sha256 == sha256_hex(b"0")


def test_a_record_of_another_format_is_refused_naming_the_format_and_with_a_fix():
    with pytest.raises(IntegrityError) as refused:
        record_from_dict({"format": 7777, "files": []}, "r")
    assert "7777" in refused.value.message and "ValueError" in refused.value.message
    assert refused.value.fix
