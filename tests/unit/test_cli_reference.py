"""docs/cli.md lists every command and option of `python build.py` and `kv_arith` as their parsers define them."""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import sys
from pathlib import Path

from kvbake.cli import parser

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "cli.md"


def docs_pages():
    """scripts/docs_pages.py, the generator of the site's generated pages (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("docs_pages", ROOT / "scripts" / "docs_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documented() -> str:
    pages = docs_pages()
    text = REFERENCE.read_text(encoding="utf-8")
    return text.split(pages.BEGIN, 1)[1].split(pages.END, 1)[0].strip("\n")


def test_the_reference_lists_every_command_and_option_as_the_parsers_define_them() -> None:
    generated, written = docs_pages().cli_reference(), documented()
    difference = "\n".join(difflib.unified_diff(written.splitlines(), generated.splitlines(), "docs/cli.md", "parsers", lineterm=""))
    assert generated == written, "docs/cli.md is stale; regenerate it with python scripts/docs_pages.py\n" + difference


def test_every_command_of_the_help_has_its_section() -> None:
    written = documented()
    top = parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for name in commands.choices:
        assert f"### `python build.py {name}`" in written


if __name__ == "__main__":  # regenerate the generated part of docs/cli.md (scripts/docs_pages.py writes every generated page)
    pages = docs_pages()
    REFERENCE.write_text(pages.cli_page(), encoding="utf-8")
    sys.exit(0)
