"""Edge cases of the environment-read scanners that the broader coverage tests leave open."""

from __future__ import annotations

from kvbake.bake.core.diffs import FileChange
from kvbake.bake.core.env_reads import READS, Where, registered_names, scan_added_lines, scan_source


def change(path: str, *lines: str) -> FileChange:
    return FileChange(path=path, change="modify", added_lines=tuple(line + "\n" for line in lines))


def added_reads(*lines: str) -> set[str]:
    return set(scan_added_lines("0001", [change("pkg/mod.py", *lines)]))


# --- added lines ----------------------------------------------------------------------------------------------------

def test_an_indented_comment_line_is_not_a_read() -> None:
    assert added_reads("def f():", '    # os.environ["FOO_BAR"] was read here once', "    return 1") == set()


def test_a_comment_line_inside_a_split_call_does_not_hide_the_read() -> None:
    assert added_reads("value = os.getenv(", "    # the switch below", '    "FOO_BAR")') == {"FOO_BAR"}


def test_a_name_ending_in_x_keeps_its_last_letter() -> None:
    assert added_reads("flag = envs.VLLM_FLAG_X") == {"VLLM_FLAG_X"}


def test_a_write_ending_the_added_lines_with_trailing_blanks_is_not_a_read() -> None:
    assert added_reads('os.environ["FOO_BAR"] = ') == set()


def test_an_assignment_cut_off_right_after_its_equals_sign_counts_as_a_read() -> None:
    # no value is seen after the `=`, so the scanner cannot call it a write and stays on the safe side
    assert added_reads('os.environ["FOO_BAR"] =') == {"FOO_BAR"}


def test_a_dict_key_outside_the_registry_file_is_not_a_read() -> None:
    assert added_reads('    "FOO_BAR": 1,', 'x = register_env("OTHER_NAME")') == set()


def test_a_non_python_file_before_a_python_file_does_not_stop_the_scan() -> None:
    found = scan_added_lines("0001", [change("docs/notes.md", "FOO_BAR"), change("pkg/mod.py", 'x = os.getenv("FOO_BAR")')])
    assert found == {"FOO_BAR": [Where("0001", "pkg/mod.py", READS)]}


# --- whole files ----------------------------------------------------------------------------------------------------

def test_envs_attributes_count_without_a_visible_import() -> None:
    assert scan_source("pkg/mod.py", "if envs.VLLM_BARE:\n    pass\n") == {"VLLM_BARE"}


def test_a_plain_import_of_vllm_envs_is_followed() -> None:
    assert scan_source("pkg/mod.py", "import vllm.envs\nif vllm.envs.VLLM_DOTTED:\n    pass\n") == {"VLLM_DOTTED"}


def test_envs_imported_from_vllm_under_another_name_is_followed() -> None:
    assert scan_source("pkg/mod.py", "from vllm import envs as flags\nif flags.VLLM_FLAGGED:\n    pass\n") == {"VLLM_FLAGGED"}


def test_getenv_through_an_os_alias_is_followed() -> None:
    assert scan_source("pkg/mod.py", 'import os as system\nx = system.getenv("VIA_OS_ALIAS")\n') == {"VIA_OS_ALIAS"}


def test_another_module_imported_under_an_alias_is_not_envs() -> None:
    assert scan_source("pkg/mod.py", "import json as js\nx = js.JSON_LIMIT\n") == set()


def test_a_comparison_other_than_in_against_environ_is_not_a_read() -> None:
    assert scan_source("pkg/mod.py", 'import os\nsame = "FOO_BAR" is os.environ\n') == set()


def test_an_equality_with_a_name_like_string_is_not_a_read() -> None:
    assert scan_source("pkg/mod.py", 'mode = "a"\nif "FOO_BAR" == mode:\n    pass\n') == set()


# --- the registry ---------------------------------------------------------------------------------------------------

def test_another_dict_is_not_the_registry() -> None:
    text = 'defaults = {"VLLM_DEFAULT_ONLY": 1}\ndefaults["VLLM_STORED_ONLY"] = 2\nenvironment_variables = {"VLLM_REAL": None}\n'
    assert registered_names(text) == {"VLLM_REAL"}


def test_registry_keys_that_are_not_string_constants_are_skipped() -> None:
    text = 'base = {}\nKEY = "VLLM_VIA_NAME"\nenvironment_variables = {**base, KEY: None, 1: None, "VLLM_LITERAL": None}\n'
    assert registered_names(text) == {"VLLM_LITERAL"}


def test_a_late_registration_under_a_computed_key_is_skipped() -> None:
    text = 'environment_variables = {}\nkey = "VLLM_COMPUTED"\nenvironment_variables[key] = None\nenvironment_variables["VLLM_LATE"] = None\n'
    assert registered_names(text) == {"VLLM_LATE"}


def test_broken_envs_text_falls_back_to_the_registry_keys_only() -> None:
    text = 'from os import getenv\nenvironment_variables = {\n    "VLLM_KEY": lambda: getenv("VLLM_READ_INSIDE"),\ndef (:\n'
    assert registered_names(text) == {"VLLM_KEY"}
