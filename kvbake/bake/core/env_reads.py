"""Which environment variable names Python code reads or registers: in a patch's added lines, or in a whole source."""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    from kvbake.bake.core.diffs import FileChange

ENVS_PATH = "vllm/envs.py"
REGISTRY_DICT = "environment_variables"
READS = "reads"
REGISTERS = "registers"
NAME = r"[A-Z][A-Z0-9_]{2,}"
SWITCH_NAME = re.compile(rf"^{NAME}$")
_Q = rf"""["']({NAME})["']"""
_ENV = r"(?<![\w.])(?:os\.)?environ"
READ_PATTERNS = (
    re.compile(rf"{_ENV}\s*\[\s*{_Q}\s*\](?!\s*=[^=])"),
    re.compile(rf"{_ENV}\.get\(\s*{_Q}"),
    re.compile(rf"(?<![\w.])(?:os\.)?getenv\(\s*{_Q}"),
    re.compile(rf"{_Q}\s+(?:not\s+)?in\s+{_ENV}(?!\w)"),
    re.compile(rf"(?<![\w.])(?:vllm\.)?envs\.({NAME})(?!\w)"),
    re.compile(rf"(?<![\w.])(?:vllm\.)?envs\.is_set\(\s*{_Q}"),
)
REGISTER_PATTERNS = (
    re.compile(rf"^[ \t]*{_Q}\s*:", re.MULTILINE),
    re.compile(rf"(?<![\w.])\w*env\w*\(\s*{_Q}"),
)


@dataclass(frozen=True)
class Where:
    """One place an added line reads or registers a name: the patch, the file, and which of the two."""

    patch_id: str
    path: str
    how: str


def is_switch_name(name: str) -> bool:
    return bool(SWITCH_NAME.match(name))


def _code_text(lines: Iterable[str]) -> str:
    """Added lines joined into one fragment text; whole-line comments are blanked so they match nothing."""
    kept = [line.rstrip("\r\n") for line in lines]
    return "\n".join("" if line.lstrip().startswith("#") else line for line in kept)


def _regex_names(text: str, patterns: Sequence[re.Pattern[str]]) -> list[str]:
    """Names matched by any pattern, in text order, without repeats."""
    hits = sorted((m.start(1), m.group(1)) for p in patterns for m in p.finditer(text))
    return list(dict.fromkeys(name for _, name in hits))


def scan_added_lines(patch_id: str, changes: Iterable[FileChange], envs_path: str = ENVS_PATH) -> dict[str, list[Where]]:
    """Names each patch's added Python lines read (anywhere) or register (in vLLM's envs.py), with where."""
    found: dict[str, list[Where]] = {}
    for change in changes:
        if not change.path.endswith(".py"):
            continue
        text = _code_text(change.added_lines)
        is_registry = change.path == envs_path
        patterns = READ_PATTERNS + REGISTER_PATTERNS if is_registry else READ_PATTERNS
        how = REGISTERS if is_registry else READS
        for name in _regex_names(text, patterns):
            found.setdefault(name, []).append(Where(patch_id, change.path, how))
    return found


def _dotted(node: ast.AST) -> str | None:
    """`os.environ` for the expression os.environ; None for anything but names and attribute chains."""
    if isinstance(node, ast.Name):
        return node.id
    owner = _dotted(node.value) if isinstance(node, ast.Attribute) else None
    return f"{owner}.{node.attr}" if owner else None


class _EnvReads(ast.NodeVisitor):
    """Collects the names a module reads from the environment, following how it imported os and vllm.envs."""

    def __init__(self, skip_registry: bool) -> None:
        self.names: set[str] = set()
        self.environ, self.getenv, self.envs = {"os.environ"}, {"os.getenv"}, {"envs", "vllm.envs"}
        self.skip_registry = skip_registry

    def _add(self, node: ast.AST | None) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and is_switch_name(node.value):
            self.names.add(node.value)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "os" and alias.asname:
                self.environ.add(f"{alias.asname}.environ")
                self.getenv.add(f"{alias.asname}.getenv")
            elif alias.name == "vllm.envs" and alias.asname:
                self.envs.add(alias.asname)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        bound = {"os.environ": self.environ, "os.getenv": self.getenv, "vllm.envs": self.envs}
        for alias in node.names:
            if f"{node.module}.{alias.name}" in bound:
                bound[f"{node.module}.{alias.name}"].add(alias.asname or alias.name)
            elif node.module == "vllm.envs" and is_switch_name(alias.name):
                self.names.add(alias.name)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and _dotted(node.value) in self.environ:
            self._add(node.slice)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func, first = node.func, node.args[0] if node.args else None
        owner = _dotted(func.value) if isinstance(func, ast.Attribute) else None
        if _dotted(func) in self.getenv or (owner in self.environ and func.attr == "get") or (owner in self.envs and func.attr == "is_set"):
            self._add(first)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) and _dotted(node.comparators[0]) in self.environ:
            self._add(node.left)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load) and is_switch_name(node.attr) and _dotted(node.value) in self.envs:
            self.names.add(node.attr)
        self.generic_visit(node)

    def _visit_assignment(self, node: ast.Assign | ast.AnnAssign, targets: list[ast.expr]) -> None:
        if self.skip_registry and any(_names_registry(t) for t in targets):
            return
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._visit_assignment(node, node.targets)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._visit_assignment(node, [node.target])


def _names_registry(target: ast.expr) -> bool:
    """True for `environment_variables` and `environment_variables[...]` as an assignment target."""
    node = target.value if isinstance(target, ast.Subscript) else target
    return isinstance(node, ast.Name) and node.id == REGISTRY_DICT


def _parse(text: str) -> ast.Module | None:
    """The module's tree, or None when it is not valid Python; source warnings (bad escapes) are not ours to report."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(text)
        except (SyntaxError, ValueError):
            return None


def scan_source(path: str, text: str, envs_path: str = ENVS_PATH) -> set[str]:
    """Names a whole patched file reads; in vLLM's envs.py the registry entries are registrations, not reads."""
    if not path.endswith(".py"):
        return set()
    tree = _parse(text)
    if tree is None:
        return set(_regex_names(_code_text(text.splitlines()), READ_PATTERNS))
    finder = _EnvReads(skip_registry=path == envs_path)
    finder.visit(tree)
    return finder.names


def _registry_keys(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == REGISTRY_DICT for t in targets):
                names.update(k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name):
            if node.value.id == REGISTRY_DICT and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                names.add(node.slice.value)
    return names


def _helper_names(tree: ast.Module) -> set[str]:
    """First arguments of env_with_choices-style helpers (a bare function whose name contains "env")."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and "env" in node.func.id.lower() and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
    return names


def registered_names(envs_text: str) -> set[str]:
    """Names vLLM's envs.py registers: environment_variables keys and env_with_choices-style helper calls."""
    tree = _parse(envs_text)
    if tree is None:
        return set(_regex_names(envs_text, REGISTER_PATTERNS[:1]))
    return {n for n in _registry_keys(tree) | _helper_names(tree) if is_switch_name(n)}
