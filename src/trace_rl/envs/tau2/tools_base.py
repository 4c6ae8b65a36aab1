"""What every τ² toolkit shares: quirk settings, a cached tool table, and the `calculate` arithmetic."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from trace_rl.envs.tau2.db import Tau2DB
from trace_rl.envs.tau2.quirks import QUIRKS
from trace_rl.envs.toolkit import ToolKit

CALC_CHARS = frozenset("0123456789+-*/(). ")
MAX_POW_BITS = 10_000_000  # larger integer results are refused (see quirks.py, 'Departure')


class Tau2Tools(ToolKit):
    """Base toolkit: `self.db` is a copy-on-write `Tau2DB`; `self.quirks` maps quirk name -> enabled."""

    DOMAIN: ClassVar[str] = ""
    db: Tau2DB

    def __init__(self, db: Tau2DB, quirks: Mapping[str, bool] | None = None) -> None:
        super().__init__(db)
        self.quirks = dict.fromkeys(QUIRKS.get(self.DOMAIN, {}), True) | dict(quirks or {})

    def quirk(self, name: str) -> bool:
        return self.quirks[name]

    @classmethod
    def tool_methods(cls) -> dict[str, Callable[..., Any]]:
        cached = cls.__dict__.get("_tool_table")
        if cached is None:
            cached = super().tool_methods()
            cls._tool_table = cached  # type: ignore[attr-defined]
        return cached


_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}


def calculate_expression(expression: str) -> str:
    """τ²'s `calculate`: characters limited to digits, `+-*/().` and space; Python arithmetic; `str(round(x, 2))`."""
    if not all(char in CALC_CHARS for char in expression):
        raise ValueError("Invalid characters in expression")
    code = compile(expression, "<string>", "eval")  # same SyntaxError text as eval(expression)
    tree = ast.parse(expression, mode="eval")
    if not any(isinstance(node, ast.Pow) for node in ast.walk(tree)):
        value = eval(code, {"__builtins__": None}, {})
    else:
        value = _evaluate(tree.body)
    return str(round(float(value), 2))


def _evaluate(node: ast.AST) -> Any:
    """Python's own arithmetic, node by node, refusing integer powers too large to compute in reasonable time."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _evaluate(node.operand)
        return +value if isinstance(node.op, ast.UAdd) else -value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(left, int) and isinstance(right, int) and _too_big(node.op, left, right):
            raise OverflowError("int too large to convert to float")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.Call):  # e.g. "(2)(3)": Python's TypeError, arguments evaluated first
        func, args = _evaluate(node.func), [_evaluate(a) for a in node.args]
        return func(*args)
    if isinstance(node, ast.Tuple):
        return tuple(_evaluate(e) for e in node.elts)
    return eval(compile(ast.Expression(node), "<string>", "eval"), {"__builtins__": None}, {})


def _too_big(op: ast.operator, left: int, right: int) -> bool:
    if isinstance(op, ast.Pow):
        return right > 0 and abs(left) > 1 and right * math.log2(abs(left)) > MAX_POW_BITS
    if isinstance(op, ast.Mult):
        return left.bit_length() + right.bit_length() > MAX_POW_BITS
    return False
