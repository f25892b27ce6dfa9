"""Edge cases of the switch-coverage check that the broader coverage tests leave open."""

from __future__ import annotations

import pytest
from message_words import says

from kvbake.bake.core.diffs import FileChange
from kvbake.bake.core.env_reads import READS, REGISTERS, Where
from kvbake.bake.core.switch_coverage import (CoverageReport, base_lines, check_coverage, names_in_base, raise_for_coverage,
                                              summary_lines)
from kvbake.errors import ManifestError

from test_coverage import Declared, change

ENVS = 'import os\nenvironment_variables = {\n    "VLLM_BASE_ONE": lambda: os.getenv("VLLM_BASE_ONE"),\n}\n'


def reading_chain(*names: str) -> tuple[dict, dict]:
    """One patch whose added lines read each name, and the patched file holding just those lines."""
    lines = [f'x{i} = os.getenv("{name}")' for i, name in enumerate(names)]
    return {"0001": (change("vllm/mod.py", *lines),)}, {"vllm/mod.py": "import os\n" + "\n".join(lines) + "\n"}


# --- base lines and base names --------------------------------------------------------------------------------------

def test_base_lines_drop_added_lines_with_trailing_blanks_or_a_final_x() -> None:
    changes = {"0001": (change("a.py", "a = 1  ", "b = MAX"),)}
    assert base_lines(changes, {"a.py": "a = 1  \nb = MAX\nbase = 0\n"}) == {"a.py": ["base = 0"]}


def test_a_name_a_base_line_of_a_patched_file_reads_is_ignored() -> None:
    changes = {"0001": (change("vllm/mod.py", 'y = os.getenv("OTHER_BASE")'),)}
    tree = {"vllm/mod.py": 'import os\nx = os.getenv("OTHER_BASE")\ny = os.getenv("OTHER_BASE")\n'}
    report = check_coverage(Declared(), changes, tree)
    assert report.ok and report.base_names == ("OTHER_BASE",)


def test_names_in_base_finds_a_name_that_starts_or_ends_a_line() -> None:
    lines = {"m.py": ["flag = envs.VLLM_AT_END", "VLLM_AT_START = 1"]}
    assert names_in_base(["VLLM_AT_END", "VLLM_AT_START", "VLLM_ABSENT"], lines, set()) == {"VLLM_AT_END", "VLLM_AT_START"}


# --- which envs.py is the registry ----------------------------------------------------------------------------------

def test_a_given_base_envs_says_what_the_base_registers_even_when_the_chain_rewrites_the_entry() -> None:
    entry = '    "VLLM_BASE_ONE": lambda: os.getenv("VLLM_BASE_ONE", "1"),'
    changes = {"0001": (change("vllm/envs.py", entry),)}
    patched = f"import os\nenvironment_variables = {{\n{entry}\n}}\n"
    report = check_coverage(Declared(), changes, {"vllm/envs.py": patched}, base_envs_text=ENVS)
    assert report.ok and report.base_names == ("VLLM_BASE_ONE",)


def test_a_switch_the_given_base_envs_registers_gets_no_warning() -> None:
    changes = {"0001": (change("vllm/mod.py", "if envs.VLLM_BASE_ONE:"),)}
    tree = {"vllm/mod.py": "if envs.VLLM_BASE_ONE:\n    pass\n"}
    report = check_coverage(Declared({"VLLM_BASE_ONE": None}), changes, tree, base_envs_text=ENVS)
    assert report.ok and report.warnings == ()


def test_a_switch_read_only_by_unchanged_code_is_live() -> None:
    changes = {"0001": (change("vllm/mod.py", "x = 1"),)}
    tree = {"vllm/mod.py": "import vllm.envs as envs\nx = 1\nif envs.VLLM_OLD:\n    pass\n"}
    assert check_coverage(Declared({"VLLM_OLD": None}), changes, tree).ok


def test_a_custom_envs_path_holds_registrations_not_reads() -> None:
    entry = '    "VLLM_CUSTOM": lambda: os.getenv("VLLM_CUSTOM"),'
    changes = {"0001": (change("custom/envs.py", entry),)}
    tree = {"custom/envs.py": f"import os\nenvironment_variables = {{\n{entry}\n}}\n"}
    report = check_coverage(Declared({"VLLM_CUSTOM": None}), changes, tree, envs_path="custom/envs.py")
    assert report.reads == {"VLLM_CUSTOM": (Where("0001", "custom/envs.py", REGISTERS),)}
    assert report.registry == "patched custom/envs.py"
    assert len(report.errors) == 1 and says(report.errors[0], "dead switch")


# --- registry warnings ----------------------------------------------------------------------------------------------

def test_one_unregistered_switch_is_told_to_register_it_in_the_registry_file() -> None:
    changes, tree = reading_chain("VLLM_LONE")
    report = check_coverage(Declared({"VLLM_LONE": None}), changes, tree, base_envs_text=ENVS)
    assert len(report.warnings) == 1 and says(report.warnings[0], "register it in vllm/envs.py")


def test_two_unregistered_switches_are_told_to_register_them_in_the_registry_file() -> None:
    changes, tree = reading_chain("VLLM_ONE", "VLLM_TWO")
    report = check_coverage(Declared({"VLLM_ONE": None, "VLLM_TWO": None}), changes, tree, base_envs_text=ENVS)
    assert len(report.warnings) == 1 and says(report.warnings[0], "register them in vllm/envs.py")


def test_an_unchecked_registry_lists_every_vllm_switch_and_names_the_registry_file() -> None:
    changes, tree = reading_chain("VLLM_ONE", "VLLM_TWO")
    report = check_coverage(Declared({"VLLM_ONE": None, "VLLM_TWO": None}), changes, tree)
    assert report.registry == "unchecked" and len(report.warnings) == 1
    assert says(report.warnings[0], "VLLM_ONE, VLLM_TWO") and says(report.warnings[0], "register them in vllm/envs.py")


def test_an_unchecked_registry_without_vllm_switches_warns_nothing() -> None:
    changes, tree = reading_chain("OTHER_SWITCH")
    report = check_coverage(Declared({"OTHER_SWITCH": None}), changes, tree)
    assert report.registry == "unchecked" and report.warnings == ()


# --- patched files as bytes -----------------------------------------------------------------------------------------

def test_a_patched_file_with_invalid_utf8_is_still_scanned() -> None:
    changes = {"0001": (change("vllm/mod.py", "x = 1"),)}
    tree = {"vllm/mod.py": b'import os\nx = 1\ny = os.getenv("OTHER_OLD")  # caf\xe9\n'}
    assert check_coverage(Declared({"OTHER_OLD": None}), changes, tree).ok


# --- raising and summing up -----------------------------------------------------------------------------------------

def test_raise_for_coverage_separates_the_errors_with_semicolons() -> None:
    report = CoverageReport(errors=("VLLM_A is bad", "VLLM_B is bad"), warnings=())
    with pytest.raises(ManifestError) as caught:
        raise_for_coverage(report)
    assert says(caught.value.message, "VLLM_A is bad; VLLM_B is bad")


def test_summary_lines_give_reads_base_names_registry_warnings_then_errors() -> None:
    report = CoverageReport(errors=("an error",), warnings=("a warning",), reads={"VLLM_A": (Where("0001", "m.py", READS),)},
                            base_names=("VLLM_B", "VLLM_C"), registry="base vllm/envs.py")
    lines = summary_lines(report)
    assert len(lines) == 5 and all(isinstance(line, str) for line in lines)
    assert lines[0].startswith("VLLM_A:") and says(lines[0], "patch 0001 m.py")
    assert says(lines[1], "VLLM_B, VLLM_C")
    assert lines[2].startswith("registry:") and says(lines[2], "base vllm/envs.py")
    assert lines[3].startswith("warning:") and says(lines[3], "a warning")
    assert lines[4].startswith("error:") and says(lines[4], "an error")


def test_summary_lines_without_base_names_skip_that_line() -> None:
    lines = summary_lines(CoverageReport(errors=(), warnings=(), registry="unchecked"))
    assert len(lines) == 1 and says(lines[0], "unchecked")
