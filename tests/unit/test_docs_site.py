"""The docs cannot drift: generated pages equal their generation, every quoted command line parses, every pointer exists."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kvbake.cli import CONSOLE_PROG, PROG, parse_args
from kvbake.errors import KvbakeError

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
DOC_FILES = sorted([README, ROOT / "ARCHITECTURE.md", *DOCS.rglob("*.md"), *(ROOT / "examples").glob("*/README.md")])
PROGRAMS = {PROG: PROG, CONSOLE_PROG: CONSOLE_PROG}
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
SHELL_STOPS = {"|", "||", "&&", ";", ">", ">>", "2>", "<"}


def docs_pages():
    """scripts/docs_pages.py, the generator of the site's generated pages (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("docs_pages", ROOT / "scripts" / "docs_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------------------------
# Generated pages.


def test_every_generated_page_equals_its_generation() -> None:
    pages = docs_pages()
    for page, generate in pages.PAGES.items():
        assert page.read_text(encoding="utf-8") == generate(), \
            f"{page.relative_to(ROOT)} is stale; regenerate it with python scripts/docs_pages.py"


def test_the_exit_code_page_has_one_row_per_error_class_and_its_cases() -> None:
    from kvbake.errors import EXIT_CODES

    text = (DOCS / "exit_codes.md").read_text(encoding="utf-8")
    for cls in EXIT_CODES:
        row = next(line for line in text.splitlines() if line.startswith(f"| {cls.exit_code} |"))
        assert f"`{cls.__name__}`" in row and f" {cls.title} " in row
        assert cls is KvbakeError or cls.cases, f"{cls.__name__} lists no cases"


# ---------------------------------------------------------------------------------------------------------------
# Every command line the docs quote parses with kvbake's own parser.


@dataclass(frozen=True)
class Quoted:
    """A command line quoted in a doc: where, and its text as written (a prompt and continuations already joined)."""

    path: str
    line: int
    text: str
    inline: bool = False

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def quoted_command_lines(path: Path) -> list[Quoted]:
    """Every line of a fenced code block that runs `python build.py` or `kvbake` (after an optional `$ ` prompt, with
    `\\` continuations joined), and every inline code span outside the blocks that starts the same way (prose names a
    command or an option there, so it may leave out what the command requires: see `parsed`)."""
    found: list[Quoted] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    name = str(path.relative_to(ROOT))
    in_block, number = False, 0
    while number < len(lines):
        line = lines[number]
        number += 1
        if FENCE.match(line):
            in_block = not in_block
            continue
        if not in_block:
            for span in INLINE.findall(line):
                if program_of(span):
                    found.append(Quoted(name, number, span, inline=True))
            continue
        text = line.strip().removeprefix("$ ")
        if not program_of(text):
            continue
        start = number
        while text.endswith("\\") and number < len(lines):
            text = text[:-1].rstrip() + " " + lines[number].strip()
            number += 1
        found.append(Quoted(name, start, text))
    return found


def program_of(text: str) -> str | None:
    for program in PROGRAMS:
        if text.startswith(program + " "):
            return program
    return None


def sample_argv(text: str) -> list[str]:
    """The arguments a quoted command line gives, with its placeholders made concrete in one documented way:
    `[...]` optional parts are kept (brackets dropped, so every optional option is parsed too); `a|b` (or `a\\|b` in a
    table) alternatives take the first; `…` and `...` (elisions and repeat marks) are dropped; `<placeholder>` becomes the word
    inside; shell comments and whatever follows a pipe, `&&`, `;` or a redirection are cut. Upper-case placeholders
    (NAME, FILE, HOST:PORT, URL…) stay as they are: to argparse they are values like any other."""
    text = text.replace("\\|", "|").replace("…", " ").replace("...", " ")
    text = re.sub(r"\[|\]", "", text)
    text = re.sub(r"<([^<>\s]+)>", r"\1", text)
    words = shlex.split(text, comments=True)
    argv: list[str] = []
    for word in words:
        if word in SHELL_STOPS:
            break
        argv.append(word.split("|", 1)[0] if "|" in word and not word.startswith(("http", "{")) else word)
    program = program_of(" ".join(argv[:2]) + " ") or program_of(argv[0] + " ")
    return argv[len(program.split()):]


QUOTED = [quoted for path in DOC_FILES for quoted in quoted_command_lines(path)]


def test_the_docs_quote_command_lines_in_every_form() -> None:
    texts = [quoted.text for quoted in QUOTED]
    assert len(QUOTED) >= 100, len(QUOTED)
    assert any(t.startswith("kvbake ") for t in texts) and any(t.startswith("python build.py ") for t in texts)
    assert any(quoted.path == "docs/production.md" and quoted.text.startswith("kvbake rollback --to adopted") for quoted in QUOTED)
    assert any(quoted.text.startswith("python build.py trace --key") and quoted.path == "docs/provenance.md" for quoted in QUOTED)


def command_names() -> set[str]:
    import argparse

    from kvbake.cli import parser

    return set(next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices)


def parsed(quoted: Quoted) -> list[str]:
    """Parse a quoted command line with kvbake's parser and return the arguments it parsed. A code block's line must
    parse as it is. An inline span from prose (`kvbake init … --capture`, `python build.py capacity --deploy`) may
    name a command or option without the rest: a value an option lacks, and an argument the command requires, are
    filled with the word VALUE (its options must still exist and take what the span gives them)."""
    argv = sample_argv(quoted.text)
    if quoted.inline and len(argv) == 1 and not argv[0].startswith("-"):  # a command named in prose or a heading
        assert argv[0] in command_names(), f"{quoted}: no such command"
        return argv
    for _ in range(8):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                parse_args(argv, program_of(quoted.text))
            return argv
        except SystemExit as stop:  # --help and --version print and stop, which is a parse
            assert stop.code == 0, f"{quoted}: exit {stop.code}"
            return argv
        except KvbakeError as err:
            lacks_value = re.match(r"argument ([-\w/]+): expected one argument$", err.message)
            required = re.match(r"the following arguments are required: (.+)$", err.message)
            if quoted.inline and lacks_value:
                option = lacks_value.group(1).split("/")[0]
                at = max(i for i, word in enumerate(argv) if word == option or word.startswith(option + "="))
                argv = [*argv[:at + 1], "VALUE", *argv[at + 1:]]
            elif quoted.inline and required:
                for name in required.group(1).split(", "):
                    argv += [name.split("/")[0], "VALUE"] if name.startswith("-") else ["VALUE"]
            else:
                pytest.fail(f"{quoted} does not parse: {err.one_line()} (argv {argv})")
    pytest.fail(f"{quoted} does not parse after filling in what it leaves out (argv {argv})")


@pytest.mark.parametrize("quoted", QUOTED, ids=str)
def test_every_quoted_command_line_parses(quoted: Quoted) -> None:
    assert parsed(quoted)[:1] != [] or quoted.text.strip() in PROGRAMS


def test_the_sample_values_are_made_as_documented() -> None:
    assert sample_argv("python build.py validate --preset NAME [--oracle auto\\|recall\\|identity] [--key PUB]...") == \
        ["validate", "--preset", "NAME", "--oracle", "auto", "--key", "PUB"]
    assert sample_argv("kvbake init --donor-revision <reviewed-donor-commit>   # a comment") == \
        ["init", "--donor-revision", "reviewed-donor-commit"]
    assert sample_argv("python build.py plan --json | jq .image_id") == ["plan", "--json"]


def test_a_renamed_option_would_fail_in_a_block_and_in_prose() -> None:
    with pytest.raises(pytest.fail.Exception):
        parsed(Quoted("x.md", 1, "python build.py deploy --preset control --reasons x"))
    with pytest.raises(pytest.fail.Exception):
        parsed(Quoted("x.md", 1, "python build.py capacity --deploys", inline=True))
    assert parsed(Quoted("x.md", 1, "python build.py capacity --deploy", inline=True))[:3] == ["capacity", "--deploy", "VALUE"]


# ---------------------------------------------------------------------------------------------------------------
# Pointers: from messages, scripts and docs to pages and sections that exist.


POINTER_SOURCES = [*(ROOT / "kvbake").rglob("*.py"), *(ROOT / "kvbake").rglob("*.json"), *(ROOT / "scripts").glob("*.py"),
                   *(ROOT / "scripts").glob("*.sh"), *DOC_FILES]


def headings(page: Path) -> list[str]:
    text = re.sub(r"^(```|~~~).*?^\1", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    return [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]


@pytest.mark.reads_source
def test_no_message_points_to_a_readme_section() -> None:
    found = [str(path.relative_to(ROOT)) for path in POINTER_SOURCES if path.suffix != ".md" and "see README" in path.read_text()]
    assert not found, f"the README keeps no reference sections any more; point to the docs page instead: {found}"


@pytest.mark.reads_source
def test_every_docs_page_a_message_or_script_names_exists() -> None:
    named = {match for path in POINTER_SOURCES for match in re.findall(r"\bdocs/([\w/.-]+?\.md)\b", path.read_text())}
    assert {"deploy.md", "launcher.md", "kv_arith.md"} <= named
    missing = sorted(name for name in named if not (DOCS / name).is_file())
    assert not missing, f"pointers to pages that do not exist: {missing}"


@pytest.mark.reads_source
def test_every_section_a_message_points_to_exists() -> None:
    pointers = {(page, section) for path in POINTER_SOURCES if path.suffix != ".md"
                for page, section in re.findall(r"see docs/([\w/.-]+\.md): ([^)\"]+)\)", path.read_text())}
    assert ("deploy.md", "Deploy, rollback and recovery") in pointers
    for page, section in sorted(pointers):
        assert any(heading.startswith(section) for heading in headings(DOCS / page)), f"docs/{page} has no section {section!r}"


def test_every_relative_link_of_the_readme_resolves() -> None:
    links = re.findall(r"\]\(([^)#\s]+)\)", README.read_text(encoding="utf-8"))
    assert len(links) >= 15
    for link in links:
        assert not link.startswith(("http:", "https:")) and (ROOT / link).is_file(), link


# ---------------------------------------------------------------------------------------------------------------
# The README and the site's configuration.


def test_the_readme_is_short_and_opens_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    first_block = text.split("```console\n", 1)[1].split("```", 1)[0]
    assert first_block == ("bash scripts/demo.sh     # set up everything, then run the main job on the built-in STAND-IN example\n"
                           "bash scripts/test.sh     # set up everything, then run all tests against real engines\n")
    assert text.index("```console") < text.index("## What kvbake is")


def printed_line_patterns() -> list[re.Pattern[str]]:
    """A pattern for every line the demo scripts print: the text of each `print` of scripts/demo*.py and of the
    Python inside scripts/demo*.sh, and of each `echo`, with every value they fill in (`{...}`, `$VAR`) as a wildcard."""
    import ast

    templates: list[str] = []
    for path in sorted((ROOT / "scripts").glob("demo*")):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".py":
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print" and node.args:
                    argument = node.args[0]
                    parts = argument.values if isinstance(argument, ast.JoinedStr) else [argument]
                    templates.append("".join(part.value if isinstance(part, ast.Constant) else "{}" for part in parts))
        else:
            templates += re.findall(r'^\s*echo "(.*)"', text, flags=re.MULTILINE)
            templates += [re.sub(r"\{[^}]*\}", "{}", found) for found in re.findall(r'^print\(f?"(.*)"\)$', text, flags=re.MULTILINE)]
    patterns = []
    for template in templates:
        pieces = re.split(r"\{\}|\$\{?\w+\}?", template.strip("\n"))
        patterns.append(re.compile(".+".join(re.escape(piece) for piece in pieces)))
    return patterns


def test_the_readme_tour_quotes_only_lines_the_demo_prints() -> None:
    tour = README.read_text(encoding="utf-8").split("## What the main job prints", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    patterns = printed_line_patterns()
    lines = tour.splitlines()
    assert len(lines) == 10
    for line in lines:
        assert any(pattern.fullmatch(line) for pattern in patterns), f"the demo prints no such line: {line}"


def mkdocs_config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def nav_pages(nav: list) -> list[str]:
    pages = []
    for entry in nav:
        for value in entry.values():
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_nav_lists_every_page_once() -> None:
    listed = nav_pages(mkdocs_config()["nav"])
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(str(page.relative_to(DOCS)) for page in DOCS.rglob("*.md"))


def test_the_site_fetches_nothing_and_builds_strictly() -> None:
    config = mkdocs_config()
    assert config["docs_dir"] == "docs" and config["strict"] is True
    assert config["theme"]["name"] == "material" and config["theme"]["font"] is False
    assert config["plugins"] == ["search"], "no plugin that fetches anything at build or view time"
    assert "site/" in (ROOT / ".gitignore").read_text().splitlines()


def test_architecture_is_included_as_it_is() -> None:
    assert (DOCS / "architecture.md").read_text(encoding="utf-8").strip() == '--8<-- "ARCHITECTURE.md"'
    assert (ROOT / "ARCHITECTURE.md").is_file()


def test_the_test_script_builds_the_docs_after_set_up_and_before_the_tests() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert script.index("bash scripts/setup.sh") < script.index("bash scripts/docs.sh --check") < script.index("-m pytest")
    docs = (ROOT / "scripts" / "docs.sh").read_text()
    assert "mkdocs build --strict" in docs and "--quiet" not in docs.split("mkdocs build", 1)[1].splitlines()[0]
