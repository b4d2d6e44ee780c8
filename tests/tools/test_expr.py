"""The safe evaluator for launch expressions: integer arithmetic over known symbols, nothing else."""

from __future__ import annotations

import pytest

from sparseditto.tools.expr import ExpressionError, evaluate

SYMBOLS = {"M": 1000, "N": 61, "WARPS": 4, "RPW": 8, "BLOCK": 256}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("M", 1000),
        ("32 * WARPS", 128),
        ("M + N - 1", 1060),
        ("M // BLOCK", 3),
        ("M % BLOCK", 232),
        ("-N + 100", 39),
        ("ceil_div(M, WARPS * RPW)", 32),
        ("ceil_div(N, 32)", 2),
        ("ceil_div(64, 32)", 2),
        ("min(N, 32)", 32),
        ("max(N, 1, 2)", 61),
        ("max(min(M, 4096), 1) * 4", 4000),
        (7, 7),
    ],
)
def test_allowed_arithmetic(expr, expected):
    assert evaluate(expr, SYMBOLS) == expected


@pytest.mark.parametrize(
    "expr",
    [
        pytest.param("M.bit_length()", id="attribute access"),
        pytest.param("().__class__", id="dunder attribute"),
        pytest.param("__import__('os').system('true')", id="__import__"),
        pytest.param("abs(M)", id="call to another builtin"),
        pytest.param("open('/etc/passwd')", id="open"),
        pytest.param("(lambda: 1)()", id="lambda"),
        pytest.param("M / 2", id="true division"),
        pytest.param("M ** 2", id="power"),
        pytest.param("M << 2", id="shift"),
        pytest.param("M if N else 1", id="conditional"),
        pytest.param("[M][0]", id="subscript"),
        pytest.param("1.5 * M", id="float constant"),
        pytest.param("'a' * 3", id="string constant"),
        pytest.param("ceil_div(M, 0)", id="ceil_div by zero"),
        pytest.param("ceil_div(M)", id="ceil_div with one argument"),
        pytest.param("min()", id="min without arguments"),
        pytest.param("max(M, key=N)", id="keyword argument"),
        pytest.param("M // (N - 61)", id="floor division by zero"),
        pytest.param("M % 0", id="modulo by zero"),
        pytest.param("M +", id="syntax error"),
        pytest.param("x = 1", id="statement"),
        pytest.param("1 + " * 60 + "1", id="too long"),
    ],
)
def test_rejected_expressions(expr):
    with pytest.raises(ExpressionError):
        evaluate(expr, SYMBOLS)


def test_unknown_symbol_names_the_symbol_and_the_known_ones():
    with pytest.raises(ExpressionError) as info:
        evaluate("ceil_div(M, TILE)", SYMBOLS)
    assert "'TILE'" in str(info.value)
    assert "WARPS" in str(info.value)


def test_builtins_are_not_symbols():
    with pytest.raises(ExpressionError, match="unknown symbol"):
        evaluate("len", SYMBOLS)


def test_expression_error_is_a_value_error():
    # callers catch ValueError for every bad-geometry case
    assert issubclass(ExpressionError, ValueError)
