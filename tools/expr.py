"""A small, safe evaluator for the integer expressions of the kernel contract.

Launch geometry, shared memory, workspace sizes and tensor-map boxes (`ceil_div(M, WARPS * RPW)`), and
the validity constraints kernels declare (`VW * value_bytes <= 16`, `WN == 1 or 16 * MT * (WN - 1) < N`),
are data in a candidate, so they are parsed with `ast` and only integer arithmetic, comparisons and
boolean operators over known symbols are allowed: never `eval`. Every bad input, however malformed,
raises ExpressionError.
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
_COMPARISONS = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_FUNCS = {
    "ceil_div": lambda a, b: -(-a // b),
    "min": min,
    "max": max,
}
_MAX_LEN = 200
_MAX_DEPTH = 32
# every value, intermediate ones included, stays below this magnitude: no expression builds huge integers
MAX_MAGNITUDE = 2**62


class ExpressionError(ValueError):
    """An expression that is not integer arithmetic, comparison or logic over known symbols."""


def evaluate(expr: str | int, symbols: Mapping[str, int]) -> int:
    """The integer value of `expr`: +, -, *, //, %, ceil_div, min, max over integers and `symbols`.

    Comparisons and boolean operators are refused here (a launch size is never a truth value)."""
    value = _evaluate(expr, symbols)
    if isinstance(value, bool):
        raise ExpressionError(f"{expr!r} is a condition, not an integer")
    return value


def holds(expr: str, symbols: Mapping[str, int]) -> bool:
    """Whether the constraint `expr` is true: comparisons (chained too: `1 <= VW <= 8`) joined by and, or, not."""
    value = _evaluate(expr, symbols)
    if not isinstance(value, bool):
        raise ExpressionError(f"{expr!r} is an integer, not a condition: compare it with something")
    return value


def _evaluate(expr: str | int, symbols: Mapping[str, int]) -> int | bool:
    if type(expr) is int:
        return _checked(expr, str(expr))
    if not isinstance(expr, str):
        raise ExpressionError(f"an expression is a string or an integer, got {type(expr).__name__}")
    if len(expr) > _MAX_LEN:
        raise ExpressionError(f"expression longer than {_MAX_LEN} characters")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ExpressionError(f"not an expression: {expr!r}") from exc
    return _eval(tree.body, symbols, expr, 0)


def _checked(value: int, src: str) -> int:
    if abs(value) >= MAX_MAGNITUDE:
        raise ExpressionError(f"a value in {src!r} reaches 2**62: far beyond any launch, size or shape")
    return value


def _integer(value: int | bool, src: str) -> int:
    if isinstance(value, bool):
        raise ExpressionError(f"a condition is used as a number in {src!r}")
    return value


def _condition(value: int | bool, src: str) -> bool:
    if not isinstance(value, bool):
        raise ExpressionError(f"a number is used as a condition in {src!r}: compare it with something")
    return value


def _eval(node: ast.AST, symbols: Mapping[str, int], src: str, depth: int) -> int | bool:
    if depth > _MAX_DEPTH:
        raise ExpressionError(f"expression nested deeper than {_MAX_DEPTH} levels: {src!r}")
    depth += 1
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return _checked(node.value, src)
    if isinstance(node, ast.Name):
        if node.id not in symbols:
            raise ExpressionError(f"unknown symbol {node.id!r} in {src!r}; known: {', '.join(sorted(symbols))}")
        value = symbols[node.id]
        try:
            if isinstance(value, bool):
                raise TypeError
            value = operator.index(value)  # int and NumPy integers
        except TypeError:
            raise ExpressionError(f"symbol {node.id!r} is not an integer ({value!r}) in {src!r}") from None
        return _checked(value, src)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left = _integer(_eval(node.left, symbols, src, depth), src)
        right = _integer(_eval(node.right, symbols, src, depth), src)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise ExpressionError(f"division by zero in {src!r}")
        return _checked(_BINOPS[type(node.op)](left, right), src)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_integer(_eval(node.operand, symbols, src, depth), src)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _condition(_eval(node.operand, symbols, src, depth), src)
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARISONS for op in node.ops):
        values = [_integer(_eval(n, symbols, src, depth), src) for n in (node.left, *node.comparators)]
        return all(_COMPARISONS[type(op)](a, b) for op, a, b in zip(node.ops, values, values[1:]))
    if isinstance(node, ast.BoolOp):
        # both sides are evaluated (no short cut): an unknown symbol is an error wherever it stands
        values = [_condition(_eval(v, symbols, src, depth), src) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        args = [_integer(_eval(a, symbols, src, depth), src) for a in node.args]
        if node.func.id == "ceil_div":
            if len(args) != 2 or args[1] == 0:
                raise ExpressionError(f"ceil_div takes two arguments, the second non-zero, in {src!r}")
        elif len(args) < 2:
            raise ExpressionError(f"{node.func.id} takes two or more arguments in {src!r}")
        return int(_FUNCS[node.func.id](*args))
    raise ExpressionError(f"only integers, symbols, + - * // %, ceil_div, min, max, comparisons and and/or/not "
                          f"are allowed: {src!r}")
