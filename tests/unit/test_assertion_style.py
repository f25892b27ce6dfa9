"""Unit tests assert behaviour, not whole error texts: no test compares an error's message, fix or stop to a literal, or matches it whole."""

from __future__ import annotations

import ast
from pathlib import Path

UNIT_TESTS = Path(__file__).resolve().parent
# the fields that carry an error's text to the operator
ERROR_TEXT_FIELDS = frozenset({"message", "fix", "stop", "err", "stderr"})
SHORTEST_TEXT = 12  # a short literal ("GPU busy", "x") names a value; a longer one is a sentence


def is_error_text(node: ast.expr) -> bool:
    """`x.message`, `x.fix`, `result.stop`, `capsys.readouterr().err`, `done.stderr`, or `str(caught.value)`."""
    if isinstance(node, ast.Attribute):
        return node.attr in ERROR_TEXT_FIELDS
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and len(node.args) == 1
            and isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "value")


def is_sentence(node: ast.expr) -> bool:
    """A literal text long enough to be a whole sentence: a string, an f-string, or their concatenation."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and len(node.value) >= SHORTEST_TEXT
    if isinstance(node, ast.JoinedStr):
        return sum(len(part.value) for part in node.values if isinstance(part, ast.Constant)) >= SHORTEST_TEXT
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return is_sentence(node.left) or is_sentence(node.right)
    return False


def literal_pieces(node: ast.expr) -> list[str | None] | None:
    """A pattern's pieces in order, None for each value filled in; None when no piece of it is literal."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return [part.value if isinstance(part, ast.Constant) else None for part in node.values]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = literal_pieces(node.left), literal_pieces(node.right)
        return None if left is None and right is None else (left or [None]) + (right or [None])
    return None


def is_whole_message(pattern: ast.expr) -> bool:
    """A `match=` pattern anchored at the start that runs to the end (`$`) or spans the cause and the fix (`; fix: `)."""
    pieces = literal_pieces(pattern)
    if not pieces or not isinstance(pieces[0], str) or not pieces[0].startswith("^"):
        return False
    last = pieces[-1]
    to_the_end = isinstance(last, str) and last.endswith("$") and not last.endswith("\\$")
    return to_the_end or any(isinstance(piece, str) and "; fix: " in piece for piece in pieces)


def is_raises(node: ast.Call) -> bool:
    """`pytest.raises(...)` or a bare `raises(...)`."""
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr == "raises") or (isinstance(func, ast.Name) and func.id == "raises")


def whole_text_comparisons(source: str) -> list[int]:
    """Line numbers where an error text is compared for equality with a literal sentence, or `pytest.raises` matches it whole."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            left, right = node.left, node.comparators[0]
            if (is_error_text(left) and is_sentence(right)) or (is_error_text(right) and is_sentence(left)):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and is_raises(node):
            if any(keyword.arg == "match" and is_whole_message(keyword.value) for keyword in node.keywords):
                lines.append(node.lineno)
    return sorted(lines)


def test_the_check_sees_a_whole_message_and_lets_named_fields_pass() -> None:
    flagged = whole_text_comparisons(
        'assert caught.value.message == "the node b is unreachable now"\n'
        'assert caught.value.fix == f"run python build.py deploy --revert on {node}"\n'
        'assert str(caught.value) == "duplicate entries in the thin layer"\n'
        'assert capsys.readouterr().err == "error (usage): bad option; fix: see --help\\n"\n'
        'assert "node b" in caught.value.message\n'
        'assert caught.value.exit_code == 12\n'
        'assert result.stop == failed.stop\n'
        'assert capsys.readouterr().out == "printed report line\\n"\n'
        'pytest.raises(LockError, match=r"^manifest\\.lock\\.json has format 3, this kvbake writes 2$")\n'
        'pytest.raises(KvbakeError, match=f"^{message}$")\n'
        'pytest.raises(LockError, match=r"format 3")\n'
        'pytest.raises(PatchError, match=r"^patch 0001 does not apply; fix: regenerate it with git diff")\n'
        'pytest.raises(PatchError, match=r"^patch 0001 \\(1/1\\)")\n'
        'pytest.raises(PatchError, match=r"; fix: regenerate it")\n'
    )
    assert flagged == [1, 2, 3, 4, 9, 10, 12]


def test_no_unit_test_compares_a_whole_error_text() -> None:
    found = [f"{path.name}:{line}" for path in sorted(UNIT_TESTS.glob("test_*.py"))
             for line in whole_text_comparisons(path.read_text(encoding="utf-8"))]
    assert found == [], "assert the exit code, the state and the named fields instead of the whole text: " + ", ".join(found)
