"""Where `import vllm` looks first: a console script named without its folder gives no first entry kvbake can name;
an option's separate argument is never read as options, and options after it still count; a changed file is found
under a source root written with a trailing slash or ending in any letter."""

from __future__ import annotations

import pytest

from kvbake.engines.core.procfs import Process
from kvbake.ship.core.process_checks import changed_files
from kvbake.serve.core.serve_reading import first_path_entry

MODULE = ("-m", "vllm.entrypoints.openai.api_server")


def entry(*argv: str) -> str:
    return first_path_entry(Process(1, 0, argv, {}, "/srv", "/usr/bin/python3"))


def test_a_console_script_named_without_its_folder_gives_no_entry():
    assert entry("vllm", "serve", "/models/m") == "-"
    assert entry("/usr/local/bin/vllm", "serve", "/models/m") == "/usr/local/bin"


def test_an_options_separate_argument_is_not_read_as_options():
    assert entry("python3", "-W", "ignore::ImportWarning", *MODULE) == "/srv"


def test_a_safe_path_option_after_an_option_with_its_argument_still_counts():
    assert entry("python3", "-X", "utf8", "-I", *MODULE) == "-"
    assert entry("python3", "-Xutf8", "-P", *MODULE) == "-"


@pytest.mark.parametrize("root", ["/opt/src/", "/opt/PREFIX"])
def test_a_changed_file_is_found_under_any_spelling_of_the_source_root(root):
    path = root.rstrip("/") + "/vllm/x.py"
    assert changed_files({path: "C"}, root) == [(path, "C")]
