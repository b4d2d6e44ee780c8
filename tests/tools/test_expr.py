"""The safe evaluator: integer arithmetic, comparisons and boolean operators over known symbols, nothing else."""

from __future__ import annotations

import pytest

from sparseditto.tools.expr import MAX_MAGNITUDE, ExpressionError, evaluate, holds

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
        pytest.param("max(M)", id="max with one argument"),
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


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("M < N", False),
        ("N <= 61", True),
        ("M > N", True),
        ("WARPS >= 4", True),
        ("WARPS == 4", True),
        ("WARPS != 4", False),
        ("1 <= WARPS <= 8", True),  # chained comparisons mean what they mean in mathematics
        ("1 <= WARPS < 4", False),
        ("RPW * 4 <= 16", False),
        ("WARPS == 1 or 16 * RPW * (WARPS - 1) < M", True),
        ("WARPS == 1 or 16 * RPW * (WARPS - 1) < N", False),
        ("not WARPS == 1", True),
        ("M % BLOCK == 0 and N > 0", False),
        ("(M > 0 and N > 0) or not (RPW == 8)", True),
        ("ceil_div(M, BLOCK) * BLOCK >= M", True),
    ],
)
def test_constraints(expr, expected):
    assert holds(expr, SYMBOLS) is expected


@pytest.mark.parametrize(
    "expr",
    [
        pytest.param("M", id="a number is not a condition"),
        pytest.param("M + 1", id="arithmetic is not a condition"),
        pytest.param("M and N", id="and over numbers"),
        pytest.param("not M", id="not of a number"),
        pytest.param("(M < N) + 1", id="a condition used as a number"),
        pytest.param("min(M < N, 1) == 0", id="a condition passed to min"),
        pytest.param("M < TILE", id="unknown symbol"),
        pytest.param("M == 1 or TILE > 2", id="unknown symbol behind a true or"),
        pytest.param("M is N", id="identity comparison"),
        pytest.param("M in N", id="membership"),
        pytest.param("True", id="boolean constant"),
        pytest.param("M < 1.5", id="float constant"),
        pytest.param("M < N if M else N", id="conditional expression"),
        pytest.param("M < 2 ** 70", id="power"),
    ],
)
def test_rejected_constraints(expr):
    with pytest.raises(ExpressionError):
        holds(expr, SYMBOLS)


def test_conditions_are_not_launch_sizes():
    with pytest.raises(ExpressionError, match="condition"):
        evaluate("M < N", SYMBOLS)


@pytest.mark.parametrize(
    "expr",
    [
        pytest.param("4611686018427387904", id="constant of 2**62"),
        pytest.param("M * M * M * M * M * M * M", id="product past 2**62"),
        pytest.param("BIG * 2", id="symbol near the cap doubled"),
        pytest.param("-BIG - BIG", id="negative past the cap"),
    ],
)
def test_magnitudes_are_capped(expr):
    with pytest.raises(ExpressionError, match="2\\*\\*62"):
        evaluate(expr, {**SYMBOLS, "BIG": MAX_MAGNITUDE // 2 + 1})


def test_deep_nesting_is_refused_cleanly():
    with pytest.raises(ExpressionError, match="nested"):
        evaluate("-" * 60 + "M", SYMBOLS)
    with pytest.raises(ExpressionError, match="nested"):
        evaluate("min(" * 35 + "M" + ")" * 35, SYMBOLS)


@pytest.mark.parametrize("value", [1.5, True, "3", None, [1]])
def test_symbols_must_be_integers(value):
    with pytest.raises(ExpressionError, match="not an integer"):
        evaluate("X + 1", {"X": value})


def test_numpy_integer_symbols_are_integers():
    import numpy as np

    assert evaluate("X * 2", {"X": np.int64(21)}) == 42
    assert holds("X < 100", {"X": np.int32(7)})


@pytest.mark.parametrize("expr", [None, 1.0, b"M", ["M"]])
def test_non_expressions_are_refused(expr):
    with pytest.raises(ExpressionError):
        evaluate(expr, SYMBOLS)


def test_null_bytes_are_a_clean_error():
    with pytest.raises(ExpressionError):
        evaluate("M\x00", SYMBOLS)
