"""The layout keeps its promises, read from every module's imports: no import cycle, a pure core, one engine client."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pytest

from kvbake.cli import COMMAND_STAGES, handler_of, parser

PACKAGE = Path(__file__).resolve().parents[2] / "kvbake"
RIG = PACKAGE.with_name("kvbake_rig")  # the development rig: beside the package, never installed with it
OWN = ("kvbake", "kvbake_rig")  # the top-level packages whose modules the graph holds
IMPURE = ("python_on_whales", "subprocess", "httpx")  # what a core module never imports
# The only modules that may import python_on_whales: kvbake's engine client, the rig, and the reference launcher's
# adapter (a program of its own, which kvbake runs as the operator's launcher).
ENGINE_CLIENT = ("kvbake.engines.adapters.", "kvbake_rig.", "kvbake.launcher.cli")
ENTRY_POINTS = ("kvbake.cli",)
# The house, top to bottom (ARCHITECTURE.md, "The house"): a module imports only its own room or rooms below it. The rig
# stands above the product and looks down into it; `cli` is the door to every stage; `shared` is kvbake's top-level
# modules (errors, manifest, lock, deployfile, ...); the reference launcher, a program of its own, stands on nothing.
ROOM_ORDER = ("kvbake_rig", "cli", "kubernetes", "operate", "provenance", "ship", "attest", "serve", "rebase", "bake", "registry",
              "engines", "kvarith", "guard", "terminal", "shared", "launcher")
STAGE_GROUPS = ("bake", "ship", "operate", "serve", "attest", "engines", "kvarith", "registry", "kubernetes")
# module groups whose names must not differ only by a suffix: the top-level modules, each stage, the rig
STAGE_PREFIXES = tuple(f"kvbake.{group}." for group in STAGE_GROUPS)
NAME_GROUPS = ("kvbake.", *STAGE_PREFIXES, "kvbake_rig.")


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(*roots: Path) -> dict[str, Path]:
    """Every module of the packages (kvbake and the rig unless told), by dotted name."""
    return {module_name(path, root): path for root in roots or (PACKAGE, RIG) for path in sorted(root.rglob("*.py"))}


def imports_of(path: Path, name: str, known: Iterable[str]) -> tuple[set[str], set[str]]:
    """The package modules and the other top-level modules that `path` imports anywhere (functions included)."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    own, other = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from a import b` imports the module a.b when there is one, else the name b of module a
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            (own if target.split(".")[0] in OWN else other).add(target if target.split(".")[0] in OWN else target.split(".")[0])
    return own, other


def import_graph(*roots: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Each module's imports of package modules, and of other top-level modules."""
    found = modules(*roots)
    graph, external = {}, {}
    for name, path in found.items():
        own, other = imports_of(path, name, found)
        graph[name], external[name] = {t for t in own if t in found and t != name}, other
    return graph, external


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted; a module importing itself counts."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def is_core(name: str) -> bool:
    """Core: a module in a `core` folder, a shared piece at the top (not the CLI entry point), or the KV arithmetic."""
    parts = name.split(".")
    if parts[0] != "kvbake":
        return False  # the rig is no part of the product
    top_level = len(parts) == 1 or (len(parts) == 2 and not (PACKAGE / parts[1]).is_dir())
    return "core" in parts[1:] or (top_level and name not in ENTRY_POINTS) or parts[:2] == ["kvbake", "kvarith"]


def core_violations(graph: Mapping[str, set[str]], external: Mapping[str, set[str]]) -> list[str]:
    """A core module importing python-on-whales, subprocess or httpx, or any module that is not core itself."""
    problems = []
    for name in sorted(n for n in graph if is_core(n)):
        problems += [f"{name} imports {lib}" for lib in sorted(external[name] & set(IMPURE))]
        problems += [f"{name} imports {target}, which is not core" for target in sorted(graph[name]) if not is_core(target)]
    return problems


def room_of(name: str) -> str:
    """The room a module lives in: the rig, the CLI, a folder of the package, or the shared top-level modules."""
    parts = name.split(".")
    if parts[0] != "kvbake":
        return parts[0]
    if name in ENTRY_POINTS:
        return "cli"
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ROOM_ORDER) else "shared"


def upward_edges(graph: Mapping[str, set[str]], order: Sequence[str] = ROOM_ORDER) -> list[str]:
    """Every import of a module in a room above the importer's, as `module -> module`."""
    rank = {room: place for place, room in enumerate(order)}
    return [f"{name} -> {target}" for name in sorted(graph) for target in sorted(graph[name])
            if rank[room_of(target)] < rank[room_of(name)]]


def suffix_pairs(names: Iterable[str]) -> list[tuple[str, str]]:
    """Module names of one folder group where one is the other plus a suffix (lock and locking)."""
    short = sorted({n.rpartition(".")[2] for n in names} - {"__init__"})
    return [(a, b) for a in short for b in short if a != b and b.startswith(a)]


GRAPH, EXTERNAL = import_graph()


def test_the_graph_sees_the_whole_package() -> None:
    assert {"kvbake.cli", "kvbake.bake.core.thin_layer", "kvbake.ship.adapters.rollout", "kvbake.serve.core.presets",
            "kvbake.engines.core.containerd", "kvbake.kvarith.planner", "kvbake_rig.stack"} <= set(GRAPH)
    assert not [n for n in GRAPH if n.startswith("kvbake.rig")], "the rig lives beside the package, not in it"
    assert "kvbake.engines.adapters.client" in GRAPH["kvbake_rig.profile_engine"], "the rig's imports of the package are read"
    assert "kvbake.engines.adapters.client" in GRAPH["kvbake.bake.adapters.builder"]
    assert "kvbake.bake.core.plan" in GRAPH["kvbake.bake.commands"], "imports inside functions count"
    assert "python_on_whales" in EXTERNAL["kvbake.engines.adapters.client"]


def test_no_import_cycle_between_kvbake_modules() -> None:
    found = cycles(GRAPH)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(group) for group in found)


def test_the_core_imports_neither_io_libraries_nor_adapters() -> None:
    assert [n for n in GRAPH if is_core(n) and ".core." in n], "the stages have core modules"
    problems = core_violations(GRAPH, EXTERNAL)
    assert not problems, "the core must stay pure: " + "; ".join(problems)


def test_only_the_engine_client_and_the_rig_talk_to_an_engine() -> None:
    talking = sorted(n for n in GRAPH if "python_on_whales" in EXTERNAL[n])
    assert talking and all(n.startswith(ENGINE_CLIENT) for n in talking), talking


def test_every_room_of_the_house_is_ranked() -> None:
    rooms = {room_of(name) for name in GRAPH}
    assert rooms == set(ROOM_ORDER), f"rooms not in ROOM_ORDER: {sorted(rooms - set(ROOM_ORDER))}; ranked but empty: {sorted(set(ROOM_ORDER) - rooms)}"


def test_no_import_climbs_back_up_the_house() -> None:
    upward = upward_edges(GRAPH)
    assert not upward, f"imports that climb back up the house ({' > '.join(ROOM_ORDER)}): " + "; ".join(upward)


@pytest.mark.parametrize("prefix", NAME_GROUPS)
def test_no_two_module_names_of_one_folder_group_differ_only_by_a_suffix(prefix: str) -> None:
    names = [n for n in GRAPH if n.startswith(prefix) and (prefix in STAGE_PREFIXES or n.count(".") == 1)]
    pairs = suffix_pairs(names)
    assert names and not pairs, "names that differ only by a suffix: " + ", ".join(f"{a}/{b}" for a, b in pairs)


def test_every_module_says_what_it_holds_in_a_one_line_docstring() -> None:
    unsaid = []
    for name, path in modules().items():
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        if not doc or "\n" in doc.strip():
            unsaid.append(name)
    assert not unsaid, "no one-line module docstring: " + ", ".join(unsaid)


def test_every_command_runs_from_its_stage_commands_module() -> None:
    subcommands = next(a for a in parser()._actions if a.dest == "command").choices
    assert set(COMMAND_STAGES) == set(subcommands)
    for command, stage in COMMAND_STAGES.items():
        assert handler_of(command).__module__ == f"kvbake.{stage}.commands", command


# --- the checks themselves can fail ------------------------------------------------------------

def test_a_cycle_is_found_through_any_number_of_modules() -> None:
    graph = {"kvbake.a": {"kvbake.b"}, "kvbake.b": {"kvbake.c"}, "kvbake.c": {"kvbake.a"}, "kvbake.d": {"kvbake.a"}, "kvbake.e": {"kvbake.e"}}
    assert cycles(graph) == [["kvbake.a", "kvbake.b", "kvbake.c"], ["kvbake.e"]]


def test_a_core_module_importing_an_adapter_or_subprocess_is_named() -> None:
    graph = {"kvbake.ship.core.x": {"kvbake.ship.adapters.y", "kvbake.errors"}, "kvbake.ship.adapters.y": set(), "kvbake.errors": set()}
    external = {"kvbake.ship.core.x": {"subprocess", "json"}, "kvbake.ship.adapters.y": {"httpx"}, "kvbake.errors": set()}
    assert core_violations(graph, external) == ["kvbake.ship.core.x imports subprocess",
                                                "kvbake.ship.core.x imports kvbake.ship.adapters.y, which is not core"]


def test_function_level_and_relative_imports_are_read(tmp_path: Path) -> None:
    root = tmp_path / "kvbake"
    (root / "stage" / "core").mkdir(parents=True)
    for init in (root, root / "stage", root / "stage" / "core"):
        (init / "__init__.py").write_text("")
    (root / "stage" / "core" / "a.py").write_text("def f():\n    from kvbake.stage.core import b\n    import subprocess\n")
    (root / "stage" / "core" / "b.py").write_text("from . import a\n")
    graph, external = import_graph(root)
    assert graph["kvbake.stage.core.a"] == {"kvbake.stage.core.b"} and external["kvbake.stage.core.a"] == {"subprocess"}
    assert cycles(graph) == [["kvbake.stage.core.a", "kvbake.stage.core.b"]]


def test_an_import_of_a_room_above_is_named_and_one_below_is_not() -> None:
    graph = {"kvbake.serve.core.a": {"kvbake.ship.core.b", "kvbake.errors"}, "kvbake.ship.core.b": {"kvbake.serve.core.a", "kvbake.attest.c"},
             "kvbake.attest.c": set(), "kvbake.errors": {"kvbake.launcher.core.d", "kvbake.cli"}, "kvbake.launcher.core.d": set(),
             "kvbake.cli": {"kvbake.ship.core.b"}, "kvbake.bake.e": {"kvbake_rig.stack"}, "kvbake_rig.stack": {"kvbake.bake.e"}}
    assert upward_edges(graph) == ["kvbake.bake.e -> kvbake_rig.stack", "kvbake.errors -> kvbake.cli", "kvbake.serve.core.a -> kvbake.ship.core.b"]
    assert upward_edges(graph, ("kvbake_rig", "cli", "bake", "serve", "ship", "attest", "shared", "launcher")) == [
        "kvbake.bake.e -> kvbake_rig.stack", "kvbake.errors -> kvbake.cli", "kvbake.ship.core.b -> kvbake.serve.core.a"]


def test_a_module_s_room_is_its_folder_the_door_or_the_shared_top() -> None:
    assert [room_of(n) for n in ("kvbake.ship.core.release", "kvbake.serve", "kvbake.cli", "kvbake.deployfile", "kvbake", "kvbake_rig.stack")] == [
        "ship", "serve", "cli", "shared", "shared", "kvbake_rig"]


def test_a_name_that_is_another_plus_a_suffix_is_named() -> None:
    assert suffix_pairs(["kvbake.lock", "kvbake.locking", "kvbake.manifest"]) == [("lock", "locking")]
