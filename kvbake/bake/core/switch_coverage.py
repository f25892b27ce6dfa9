"""Switch coverage: the manifest declares every environment variable the chain introduces, and the chain reads every switch."""

from __future__ import annotations

import ast
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Protocol, Sequence

from kvbake.errors import ManifestError

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
UNREGISTERED = ("vLLM warns about unregistered VLLM_* variables at boot and refuses to start with fail_on_environ_validation; "
                "register it in vllm/envs.py, or never start with that option")
FIX = ("declare every name the chain reads under switches (off by default) or forbidden, "
       "and remove or rename every switch no code reads")


class Declares(Protocol):
    """What the check needs from a manifest: the declared and the forbidden names."""

    @property
    def switches(self) -> Mapping[str, object]: ...

    @property
    def forbidden(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class Where:
    """One place an added line reads or registers a name: the patch, the file, and which of the two."""

    patch_id: str
    path: str
    how: str


@dataclass(frozen=True)
class CoverageReport:
    """The verdict: errors (fatal), warnings, the names the chain introduces, and the base names it reads."""

    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    reads: Mapping[str, tuple[Where, ...]] = field(default_factory=dict)
    base_names: tuple[str, ...] = ()
    registry: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors


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


def _text(data: bytes | str) -> str:
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


def introduced_names(patches_changes: Mapping[str, Sequence[FileChange]], envs_path: str = ENVS_PATH) -> dict[str, tuple[Where, ...]]:
    """Every name the chain's added lines read or register, with each place, in chain order."""
    merged: dict[str, list[Where]] = {}
    for patch_id, changes in patches_changes.items():
        for name, places in scan_added_lines(patch_id, changes, envs_path).items():
            merged.setdefault(name, []).extend(places)
    return {name: tuple(dict.fromkeys(places)) for name, places in sorted(merged.items())}


def base_lines(patches_changes: Mapping[str, Sequence[FileChange]], overlay: Mapping[str, str]) -> dict[str, list[str]]:
    """Per patched file, the lines no patch added: each line of the result is a base line or an added one."""
    added: dict[str, Counter[str]] = {}
    for changes in patches_changes.values():
        for change in changes:
            added.setdefault(change.path, Counter()).update(line.rstrip("\r\n") for line in change.added_lines)
    return {path: list((Counter(text.splitlines()) - added.get(path, Counter())).elements()) for path, text in overlay.items()}


def names_in_base(candidates: Iterable[str], lines: Mapping[str, list[str]], base_registry: set[str]) -> set[str]:
    """Candidates the base code already names (a base line of a patched file, or the base's registry)."""
    text = "\n".join(line for kept in lines.values() for line in kept)
    return {n for n in candidates if n in base_registry or re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text)}


def _registry(overlay: Mapping[str, str], introduced: Mapping[str, tuple[Where, ...]], base_envs_text: str | None,
              envs_path: str) -> tuple[set[str] | None, set[str], str]:
    """Registered names (None when unknown), the base's own registrations, and where they were read from."""
    added = {n for n, places in introduced.items() if any(w.how == REGISTERS for w in places)}
    if envs_path in overlay:
        everything = registered_names(overlay[envs_path])
        base = everything - added if base_envs_text is None else registered_names(base_envs_text)
        return everything, base, f"patched {envs_path}"
    if base_envs_text is not None:
        base = registered_names(base_envs_text)
        return base | added, base, f"base {envs_path}"
    return None, set(), "unchecked"


def _where_text(places: Iterable[Where]) -> str:
    return ", ".join(f"patch {w.patch_id} {w.path}{' (registry)' if w.how == REGISTERS else ''}" for w in places)


def _undeclared_errors(introduced: Mapping[str, tuple[Where, ...]], declared: Declares, ignored: set[str]) -> list[str]:
    errors = []
    for name, places in introduced.items():
        if name in ignored or name in declared.switches or name in declared.forbidden:
            continue
        verb = "read" if any(w.how == READS for w in places) else "registered"
        errors.append(f"{name} is {verb} by the code but not declared as a switch or forbidden ({_where_text(places)})")
    return errors


def _dead_errors(declared: Declares, used: set[str]) -> list[str]:
    return [f"switch {name} is a dead switch: declared in the manifest but no code of the chain reads it"
            for name in sorted(declared.switches) if name not in used]


def _registry_warnings(declared: Declares, registry: set[str] | None, envs_path: str) -> list[str]:
    vllm = [name for name in sorted(declared.switches) if name.startswith("VLLM_")]
    if registry is None:
        return [f"the vLLM registry could not be checked (the chain does not touch {envs_path} and no copy of it was given): "
                f"{', '.join(vllm)} may be unregistered, and {UNREGISTERED}"] if vllm else []
    return [f"switch {name} is not registered in {envs_path}: {UNREGISTERED}" for name in vllm if name not in registry]


def check_coverage(manifest: Declares, patches_changes: Mapping[str, Sequence[FileChange]], overlay_tree: Mapping[str, bytes | str],
                   base_envs_text: str | None = None, envs_path: str = ENVS_PATH) -> CoverageReport:
    """Compare what the chain reads with what the manifest declares; pure, over parsed patches and patched files."""
    overlay = {path: _text(data) for path, data in overlay_tree.items()}
    introduced = introduced_names(patches_changes, envs_path)
    registry, base_registry, source = _registry(overlay, introduced, base_envs_text, envs_path)
    ignored = names_in_base(introduced, base_lines(patches_changes, overlay), base_registry)
    used = {n for n, places in introduced.items() if any(w.how == READS for w in places)}
    for path, text in overlay.items():
        used |= scan_source(path, text, envs_path)
    errors = _undeclared_errors(introduced, manifest, ignored) + _dead_errors(manifest, used)
    reads = {n: places for n, places in introduced.items() if n not in ignored}
    return CoverageReport(tuple(errors), tuple(_registry_warnings(manifest, registry, envs_path)), reads, tuple(sorted(ignored)), source)


def raise_for_coverage(report: CoverageReport) -> None:
    """Raise one ManifestError (exit 3) that names every coverage error on one line; warnings never raise."""
    if report.errors:
        raise ManifestError(f"switch coverage: {len(report.errors)} problem(s): {'; '.join(report.errors)}", FIX)


def summary_lines(report: CoverageReport) -> list[str]:
    """Readable lines: each introduced name and where, the ignored base names, then warnings and errors."""
    lines = [f"{name}: {_where_text(places)}" for name, places in report.reads.items()]
    if report.base_names:
        lines.append(f"already in the base (ignored): {', '.join(report.base_names)}")
    lines.append(f"registry: {report.registry}")
    lines += [f"warning: {w}" for w in report.warnings] + [f"error: {e}" for e in report.errors]
    return lines
