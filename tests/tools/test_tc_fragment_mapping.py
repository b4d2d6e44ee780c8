"""The tensor-core row-group SpMM's index mapping, emulated lane by lane on the CPU.

spmm_csr_tc_rowgroup.cu computes C transposed with mma.m16n8k16: B rows of the group's union columns as the
16 x 16 A operand (fragment pairs made with byte permutes), the group's tile as the 16 x 8 B operand, and the
accumulators stored as two C rows per lane. This test rebuilds every lane's registers exactly as the kernel
loads them, assembles the operands with the PTX ISA's documented fragment layouts, multiplies, scatters D
back to the lanes and stores it as the kernel does; the result must be A @ B. It checks the mapping, the
preparation's tile positions and the edge handling (N not a multiple of the tile, M not a multiple of 8);
the GPU tests check the compiled kernel itself.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparseditto.tools.families.base import Problem
from sparseditto.tools.families.csr_spmm.preparations import row_group_union


def emulate(A: sp.csr_matrix, B: np.ndarray, MT: int) -> np.ndarray:
    M, N = A.shape[0], B.shape[1]
    prob = Problem(dtype="fp32", symbols={}, inputs={"rowptr": A.indptr.astype(np.int32), "colind": A.indices.astype(np.int32)},
                   input_dtypes={}, outputs={})
    arr, sym = row_group_union(prob, {})
    stride, CPT = sym["max_union"] + 8, 2 * MT
    C = np.full((M, N), np.nan)

    def b_at(k: int, c: int) -> float:  # a lane's load of B[k][c]: zero past N
        return B[k, c] if c < N else 0.0

    for grp in range(sym["n_groups"]):
        u0, u1 = arr["group_ptr"][grp], arr["group_ptr"][grp + 1]
        flat = np.zeros(8 * stride)
        for j in range(A.indptr[8 * grp], A.indptr[min(8 * grp + 8, M)]):
            flat[arr["nnz_tile_pos"][j]] = A.data[j]
        tile, cols = flat.reshape(8, stride), arr["group_cols"][u0:u1]
        for tile_n in range(-(-N // (16 * MT))):  # (by * WN + wn) in the kernel
            acc = np.zeros((32, MT, 4))
            for k0 in range(0, u1 - u0, 16):
                for t in range(MT):
                    a_op, b_op = np.zeros((16, 16)), np.zeros((16, 8))
                    for lane in range(32):
                        g, q = lane // 4, lane % 4
                        c0 = tile_n * 16 * MT + CPT * g
                        rows = [cols[k0 + 2 * q + d] for d in (0, 1, 8, 9)]  # w0..w3: word t = columns c0+2t, c0+2t+1
                        # byte_perm(w0, w1, 0x5410) = (lo w0, lo w1) -> a-register 0: row g, k 2q, 2q+1, and so on
                        regs = [((rows[0], c0 + 2 * t), (rows[1], c0 + 2 * t)), ((rows[0], c0 + 2 * t + 1), (rows[1], c0 + 2 * t + 1)),
                                ((rows[2], c0 + 2 * t), (rows[3], c0 + 2 * t)), ((rows[2], c0 + 2 * t + 1), (rows[3], c0 + 2 * t + 1))]
                        # documented m16n8k16 layouts: A regs (g, 2q), (g+8, 2q), (g, 2q+8), (g+8, 2q+8); B regs (2q, g), (2q+8, g)
                        for (lo, hi), (m, k) in zip(regs, ((g, 2 * q), (g + 8, 2 * q), (g, 2 * q + 8), (g + 8, 2 * q + 8))):
                            a_op[m, k], a_op[m, k + 1] = b_at(*lo), b_at(*hi)
                        for k in (2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9):
                            b_op[k, g] = tile[g, k0 + k]
                    d = a_op @ b_op
                    for lane in range(32):
                        g, q = lane // 4, lane % 4
                        acc[lane, t] += [d[g, 2 * q], d[g, 2 * q + 1], d[g + 8, 2 * q], d[g + 8, 2 * q + 1]]
            for lane in range(32):  # the kernel's store: acc[t] = C[r0][c0+2t], C[r0+1][c0+2t], C[r0][c0+2t+1], C[r0+1][c0+2t+1]
                g, q = lane // 4, lane % 4
                c0 = tile_n * 16 * MT + CPT * g
                for h in range(2):
                    row = 8 * grp + 2 * q + h
                    for t in range(MT):
                        if row < M and c0 + 2 * t < N:
                            C[row, c0 + 2 * t] = acc[lane, t, h]
                        if row < M and c0 + 2 * t + 1 < N:
                            C[row, c0 + 2 * t + 1] = acc[lane, t, 2 + h]
    return C


@pytest.mark.parametrize(("M", "K", "N", "density", "MT"),
                         [(16, 40, 64, 0.2, 4), (37, 50, 45, 0.1, 4), (24, 70, 130, 0.3, 8), (8, 33, 256, 0.5, 16), (5, 9, 7, 0.0, 4)])
def test_the_emulated_kernel_computes_a_times_b(M, K, N, density, MT):
    A = sp.random(M, K, density=density, format="csr", random_state=1)
    A.sort_indices()
    B = np.random.default_rng(2).uniform(-1, 1, (K, N))
    C = emulate(A, B, MT)
    assert not np.isnan(C).any(), "an element of C was never stored"
    np.testing.assert_allclose(C, A @ B, rtol=0, atol=1e-12)
