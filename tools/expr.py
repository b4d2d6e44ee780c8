"""A small, safe evaluator for launch expressions such as `ceil_div(M, WARPS * RPW)`.

Launch geometry, shared memory and workspace sizes are data in a candidate, so they are parsed with
`ast` and only integer arithmetic over known symbols is allowed: never `eval`.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_FUNCS = {
    "ceil_div": lambda a, b: -(-a // b),
    "min": min,
    "max": max,
}
_MAX_LEN = 200


class ExpressionError(ValueError):
    """An expression that is not integer arithmetic over known symbols."""


def evaluate(expr: str | int, symbols: Mapping[str, int]) -> int:
    """Evaluate `expr` with `symbols`; raises ExpressionError on anything but +,-,*,//,%, ceil_div, min, max."""
    if isinstance(expr, int):
        return expr
    if len(expr) > _MAX_LEN:
        raise ExpressionError(f"expression longer than {_MAX_LEN} characters")
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not an expression: {expr!r}") from exc
    return _eval(tree.body, symbols, expr)


def _eval(node: ast.AST, symbols: Mapping[str, int], src: str) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in symbols:
            raise ExpressionError(f"unknown symbol {node.id!r} in {src!r}; known: {', '.join(sorted(symbols))}")
        return int(symbols[node.id])
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left, symbols, src), _eval(node.right, symbols, src)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise ExpressionError(f"division by zero in {src!r}")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, symbols, src)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        args = [_eval(a, symbols, src) for a in node.args]
        if node.func.id == "ceil_div":
            if len(args) != 2 or args[1] == 0:
                raise ExpressionError(f"ceil_div takes two arguments, the second non-zero, in {src!r}")
        elif not args:
            raise ExpressionError(f"{node.func.id} needs arguments in {src!r}")
        return int(_FUNCS[node.func.id](*args))
    raise ExpressionError(f"only integers, symbols, + - * // %, ceil_div, min and max are allowed: {src!r}")
