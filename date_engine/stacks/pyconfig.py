"""A Python configuration file read as data, never run: the names it assigns to literals and
to arithmetic on literals and on names assigned before (its own, or the defaults it overrides,
as nanoGPT's configurator runs a config inside train.py's globals).

Imports and docstrings are passed over; an assignment whose value is anything else (a call, an
attribute, a condition) is recorded as unread, so that a reader refuses it only where it needs
that name; any other statement (``if``, ``for``, ``def``...) could change what follows and is
refused, naming its line.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from date_engine.errors import SpecError

__all__ = ["PyConfig", "read_pyconfig"]

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_LARGEST = 1e18
"""The largest magnitude an arithmetic result may reach (``10 ** 10 ** 10`` is refused, not
computed)."""


class _Unreadable(Exception):
    """An expression this reader does not evaluate (not literal arithmetic)."""


@dataclass(frozen=True)
class PyConfig:
    """What a configuration file assigns: ``values`` by name (the last assignment wins), the
    line of each, and the names it assigns to something that is not literal arithmetic."""

    source: str
    values: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    unread: dict[str, int] = field(default_factory=dict)
    """Name -> the line whose value was not read (a call, an attribute...)."""


def read_pyconfig(text: str, source: str, scope: Mapping[str, Any] | None = None) -> PyConfig:
    """The assignments of ``text`` (a file's contents, ``source`` its name for messages), names
    in expressions resolved against the file's earlier assignments, then ``scope`` (the defaults
    the file overrides). Raises SpecError, naming the line, for a statement other than an
    assignment, an import or a docstring, and for text that is not Python."""
    try:
        tree = ast.parse(text, filename=source)
    except SyntaxError as e:
        raise SpecError(f"{source}: not Python (line {e.lineno}: {e.msg}); give the "
                        "configuration file itself.") from None
    config = PyConfig(source)
    known = dict(scope or {})
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) or (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            continue
        targets = _targets(node, source)
        try:
            value = _evaluate(node.value, known)
        except _Unreadable:
            for name in targets:
                config.unread[name] = node.lineno
                config.values.pop(name, None)
                known.pop(name, None)
            continue
        for name in targets:
            config.values[name] = known[name] = value
            config.lines[name] = node.lineno
            config.unread.pop(name, None)
    return config


def _targets(node: ast.stmt, source: str) -> list[str]:
    """The names a statement assigns (``a = 1``, ``a = b = 1``, ``a: int = 1``); SpecError for
    any other statement."""
    if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
        return [t.id for t in node.targets]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
        return [node.target.id]
    kind = type(node).__name__.lower()
    raise SpecError(f"{source} line {node.lineno}: a{'n' if kind[0] in 'aeiou' else ''} {kind} "
                    "statement; this file is read, not run: keep it to assignments of values "
                    "(name = value).")


def _evaluate(node: ast.expr, known: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool,
                                                                  type(None))):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in known:
            return known[node.id]
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        raise _Unreadable(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_evaluate(e, known) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand, known)
        if not _number(value):
            raise _Unreadable("sign")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, known), _evaluate(node.right, known)
        if isinstance(left, str) and isinstance(right, str) and isinstance(node.op, ast.Add):
            return left + right
        if not (_number(left) and _number(right)):
            raise _Unreadable("operands")
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > _LARGEST):
            raise _Unreadable("power")
        try:
            value = _BINARY[type(node.op)](left, right)
        except (ZeroDivisionError, OverflowError, ValueError):
            raise _Unreadable("arithmetic") from None
        if not _number(value) or not math.isfinite(value) or abs(value) > _LARGEST:
            raise _Unreadable("range")
        return value
    raise _Unreadable(type(node).__name__)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
