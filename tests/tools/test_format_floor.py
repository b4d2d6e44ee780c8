"""The chosen format's own bandwidth floor: the arrays a kernel declares it streams, as its preparation laid them
out on this instance, plus the dense operands (CPU: preparations only)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparseditto.knowledge_base.library import get_kernel, reference_kernels
from sparseditto.tools.expr import holds
from sparseditto.tools.families import get_family
from sparseditto.tools.launch_check import LaunchRejected
from sparseditto.tools.runner import format_bytes, prepare
from spmv_problems import problem_of

SPMV = get_family("csr_spmv")


def floor_of(kernel: str, params: dict[str, int], problem) -> float:
    candidate = get_kernel(kernel).instantiate(params)
    arrays, symbols = prepare(candidate, SPMV, problem)
    return format_bytes(candidate, SPMV, problem, arrays, symbols)


def stencil(n: int) -> sp.csr_matrix:
    """The 5-point Laplacian of an n x n grid: five diagonals, no remainder."""
    one = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    return sp.csr_matrix(sp.kron(sp.identity(n), one) + sp.kron(one, sp.identity(n)))


@pytest.mark.parametrize("kernel", [k.name for k in reference_kernels() if k.streams], ids=str)
def test_every_stream_is_an_argument_of_the_kernel_and_its_condition_parses(kernel):
    k = get_kernel(kernel)
    args = {a for launch in k.kernels for a in launch.args}
    for entry in k.streams:
        name, _, condition = entry.partition(" if ")
        assert name.strip() in args, entry
        if condition:
            holds(condition, {"rest_nnz": 0, "M": 1, "K": 1, "N": 1, "nnz": 1})


def test_plain_csr_streams_its_three_arrays_and_the_operands():
    problem = problem_of(sp.random(500, 400, density=0.02, random_state=1, format="csr"))
    inputs, s = problem.inputs, problem.symbols
    csr = inputs["rowptr"].nbytes + inputs["colind"].nbytes + inputs["values"].nbytes
    operands = (min(s["K"], s["nnz"]) + s["M"]) * 4
    assert floor_of("spmv_csr_vec4", {"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0}, problem) \
        == csr + operands
    # the timing floor counts no index bytes, so every format's own floor is at least it
    assert csr + operands > SPMV.floor_bytes(s, "fp32")


def test_diagonals_without_a_remainder_stream_less_than_csr_and_no_remainder_arrays():
    problem = problem_of(stencil(64))
    dia = floor_of("spmv_dia", {"MAX_DIAGS": 8, "BLOCK": 256}, problem)
    csr = floor_of("spmv_csr_vec4", {"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0}, problem)
    M = problem.symbols["M"]
    # five diagonals of M values, one mask byte per row, the offsets; the CSR row pointers not at all
    assert dia == pytest.approx(5 * M * 4 + M + 8 * 4 + SPMV.operand_bytes(problem.symbols, "fp32"), abs=64)
    assert dia < 0.6 * csr  # 29 bytes a row against 52


def test_sixteen_bit_columns_halve_the_index_bytes():
    problem = problem_of(sp.random(2000, 2000, density=0.01, random_state=2, format="csr"))
    u16 = floor_of("spmv_csr_u16", {"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1}, problem)
    csr = floor_of("spmv_csr_vec4", {"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0}, problem)
    nnz, M = problem.symbols["nnz"], problem.symbols["M"]
    # 2 bytes less per nonzero (col16 padded to a quad), 4 more per row (row_base)
    assert csr - u16 == pytest.approx(2 * nnz - 4 * M, abs=16)


def test_a_kernel_without_streams_or_a_stream_that_is_no_array_gives_no_floor():
    problem = problem_of(sp.random(100, 100, density=0.05, random_state=3, format="csr"))
    plain = get_kernel("spmv_csr_vec4").instantiate({"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})
    assert format_bytes(plain.model_copy(update={"streams": ()}), SPMV, problem, {}, {}) is None
    with pytest.raises(LaunchRejected, match="not an input or prepared array"):
        format_bytes(plain.model_copy(update={"streams": ("rowptr", "row_lists")}), SPMV, problem, {}, {})
    assert np.isfinite(format_bytes(plain, SPMV, problem, {}, {}))
