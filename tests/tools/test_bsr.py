"""BSR on tensor cores (spmm_bsr_tc): the preparation `bsr_blocks` holds the CSR matrix exactly in dense blocks and
reports its fill, a lane-by-lane NumPy emulation of the kernel's indexing over the prepared arrays gives C = A B,
the kernel compiles and passes the compile-only verifier in each declared dtype, and an emulation of the 3xTF32
split shows why fp32 is not declared."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparseditto.knowledge_base.library import reference_kernels
from sparseditto.spec import parse_spec
from sparseditto.tools import generators
from sparseditto.tools.dtypes import to_float64, to_storage
from sparseditto.tools.families import get_family
from sparseditto.tools.families.base import Output, Problem
from sparseditto.tools.families.csr_spmm.bsr import block_fill, bsr_blocks
from sparseditto.tools.values import draw_values

from compile_checks import verify_compile_only


def fem(block: int, nodes_per_side: int, seed: int = 0) -> sp.csr_matrix:
    """A 2D FEM matrix of dense block x block blocks on a nodes_per_side^2 mesh (tools/generators.py)."""
    nnz = block * block * generators._fem_node_degree(2, 0.25) * nodes_per_side**2
    return generators.fem_blocks(np.random.default_rng(seed), int(nnz), block=block, dim=2)


def problem_of(A: sp.csr_matrix, N: int, dtype: str, seed: int = 0) -> Problem:
    """The family's instance for A: values and B drawn as the family draws them."""
    rng = np.random.default_rng(seed)
    M, K = A.shape
    A = A.tocsr()
    A.sort_indices()
    return Problem(dtype=dtype, symbols={"M": M, "K": K, "N": N, "nnz": A.nnz},
                   inputs={"rowptr": A.indptr.astype(np.int32), "colind": A.indices.astype(np.int32),
                           "values": to_storage(draw_values(rng, A.nnz, dtype), dtype),
                           "B": to_storage(draw_values(rng, K * N, dtype), dtype).reshape(K, N)},
                   input_dtypes={"rowptr": "int32", "colind": "int32", "values": dtype, "B": dtype},
                   outputs={"C": Output((M, N), dtype, 1e-2)})


def poor_fill(M: int = 70, K: int = 53) -> sp.csr_matrix:
    """Scattered nonzeros (about one per 16 x 16 block), two empty block rows, and M, K not multiples of a block."""
    A = sp.random(M, K, density=0.01, format="lil", random_state=3)
    A[M - 1, K - 1] = 0.5  # the ragged corner block
    A[17:40, :] = 0  # block rows without a block, whichever BR
    A = A.tocsr()
    A.eliminate_zeros()
    return A


MATRICES = {
    "fem24": lambda: fem(24, 3),
    "fem3": lambda: fem(3, 6),
    "poor_fill": poor_fill,
    "ragged_dense": lambda: sp.csr_matrix(np.random.default_rng(4).uniform(-1, 1, (29, 45))),
    "empty": lambda: sp.csr_matrix((37, 21)),
}
SHAPES = [(8, 8), (16, 16), (24, 24), (8, 16), (32, 8)]


@pytest.mark.parametrize("matrix", sorted(MATRICES))
@pytest.mark.parametrize(("BR", "BC"), SHAPES)
def test_bsr_blocks_hold_the_csr_matrix_exactly(matrix, BR, BC):
    A = MATRICES[matrix]()
    problem = problem_of(A, 8, "bf16")
    arrays, symbols = bsr_blocks(problem, {"BR": BR, "BC": BC, "NT": 32, "WARPS": 4})
    M, K = A.shape
    ptr, cols, vals = arrays["bsr_ptr"], arrays["bsr_col"], arrays["bsr_vals"]
    n_brows, n_blocks = symbols["n_brows"], symbols["n_blocks"]
    assert ptr.dtype == cols.dtype == np.int32 and vals.dtype == problem.inputs["values"].dtype
    assert n_brows == -(-M // BR) and len(ptr) == n_brows + 1 and ptr[0] == 0 and ptr[-1] == n_blocks
    assert (np.diff(ptr) >= 0).all() and len(vals) == max(n_blocks, 1) * BR * BC
    dense = np.zeros((n_brows * BR, (K // BC + 1) * BC), dtype=vals.dtype)
    for i in range(n_brows):
        assert (np.diff(cols[ptr[i]:ptr[i + 1]]) > 0).all()  # sorted, distinct
        for j in range(ptr[i], ptr[i + 1]):
            block = vals[j * BR * BC:(j + 1) * BR * BC].reshape(BR, BC)
            pattern = A[i * BR:(i + 1) * BR, cols[j] * BC:(cols[j] + 1) * BC]
            assert pattern.nnz, "a stored block without a nonzero"
            dense[i * BR:(i + 1) * BR, cols[j] * BC:(cols[j] + 1) * BC] = block
    # every value in its place, bit for bit, and zeros (+0) everywhere else, including past M and K
    expected = np.zeros_like(dense)
    rows = np.repeat(np.arange(M), np.diff(problem.inputs["rowptr"]))
    expected[rows, problem.inputs["colind"]] = problem.inputs["values"]
    assert np.array_equal(dense, expected)
    stored = n_blocks * BR * BC
    assert symbols["fill_permille"] == -(-1000 * stored // max(A.nnz, 1))
    assert block_fill(problem.inputs["rowptr"], problem.inputs["colind"], BR, BC) == pytest.approx(stored / max(A.nnz, 1))


def test_fill_is_one_for_fem_blocks_on_their_grid_and_poor_for_scattered_nonzeros():
    A = fem(24, 3)
    rowptr, colind = A.indptr, A.indices
    assert block_fill(rowptr, colind, 8, 8) == block_fill(rowptr, colind, 24, 24) == 1.0
    assert 1.0 < block_fill(rowptr, colind, 16, 16) < 1.5  # 16-wide blocks straddle the 24-wide ones
    assert block_fill(poor_fill().indptr, poor_fill().indices, 16, 16) > 100


def test_bsr_blocks_is_a_preparation_of_the_family():
    family = get_family("csr_spmm")
    spec = parse_spec({"operation": "spmm", "pattern": {"density": 0.05}, "M": 101, "K": 77, "N": 19, "dtype": "fp16"})
    problem = family.make_problem(spec, seed=2)
    arrays, symbols = family.preparations["bsr_blocks"](problem, {"BR": 16, "BC": 16, "NT": 32, "WARPS": 2})
    C = emulate_kernel(arrays, problem.inputs["B"], "fp16", 101, 77, 19, BR=16, BC=16, NT=32)
    np.testing.assert_allclose(C, family.reference(problem)["C"], rtol=1e-12, atol=0)
    assert symbols["fill_permille"] > 1000
    with pytest.raises(ValueError, match="positive"):
        bsr_blocks(problem, {"BR": 0, "BC": 16})


# ---- the kernel's indexing, lane by lane --------------------------------------------------------------------


def emulate_kernel(arrays, B_stored, dtype, M, K, N, BR, BC, NT):
    """spmm_bsr_tc thread by thread, in float64: each warp's stages (B rows of the block column, zeros past K
    and N, rows padded to NT + 8), ldmatrix.trans out of them, the block's B_op pairs as 32-bit lane loads, the
    PTX ISA's m16n8k16 / m16n8k8 fragment layouts, and the kernel's stores. Unwritten elements stay NaN."""
    KS = 8 if BC % 16 else 16
    KREG, STRIDE = KS // 8, NT + 8
    vals = to_float64(arrays["bsr_vals"], dtype)
    B = to_float64(B_stored, dtype)
    lane = np.arange(32)
    g, q = lane // 4, lane % 4
    C = np.full((M, N), np.nan)
    n_brows = len(arrays["bsr_ptr"]) - 1
    for br in range(n_brows):
        for n0 in range(0, N, NT):
            acc = np.zeros((NT // 16, BR // 8, 32, 4))
            for j in range(arrays["bsr_ptr"][br], arrays["bsr_ptr"][br + 1]):
                k0 = int(arrays["bsr_col"][j]) * BC
                stage = np.zeros((BC, STRIDE))
                rows, cols = min(BC, K - k0), min(NT, N - n0)
                stage[:rows, :cols] = B[k0:k0 + rows, n0:n0 + cols]
                flat = stage.ravel()
                blk = vals[j * BR * BC:(j + 1) * BR * BC]
                for ks in range(BC // KS):
                    for mt in range(NT // 16):
                        i = (lane // 8) % (2 * KREG)  # sd_load_a: lane l addresses row l % 8 of matrix i
                        addr = (ks * KS + (i // 2) * 8 + lane % 8) * STRIDE + mt * 16 + (i % 2) * 8
                        # matrix m's rows come from lanes 8m .. 8m+7; .trans gives lane (g, q) rows 2q, 2q+1 of column g
                        a = np.stack([np.stack([flat[addr[8 * m + 2 * q + h] + g] for h in (0, 1)], -1)
                                      for m in range(2 * KREG)], 1)  # (lane, register, half)
                        a_op = np.zeros((16, KS))
                        for m in range(2 * KREG):  # a0 (g, 2q), a1 (g+8, 2q), a2 (g, 2q+8), a3 (g+8, 2q+8)
                            for h in (0, 1):
                                a_op[g + 8 * (m % 2), 2 * q + 8 * (m // 2) + h] = a[:, m, h]
                        for rt in range(BR // 8):
                            b_op = np.zeros((KS, 8))
                            for r in range(KREG):  # b_r: blk[8rt + g][ks*KS + 2q + 8r .. +1] -> B_op (2q + 8r, g)
                                base = (8 * rt + g) * BC + ks * KS + 2 * q + 8 * r
                                for h in (0, 1):
                                    b_op[2 * q + 8 * r + h, g] = blk[base + h]
                            d = a_op @ b_op  # d0 (g, 2q), d1 (g, 2q+1), d2 (g+8, 2q), d3 (g+8, 2q+1)
                            acc[mt, rt] += np.stack([d[g, 2 * q], d[g, 2 * q + 1], d[g + 8, 2 * q], d[g + 8, 2 * q + 1]], -1)
            for rt in range(BR // 8):
                for h in (0, 1):
                    for mt in range(NT // 16):
                        for ln in range(32):
                            row, col = br * BR + 8 * rt + 2 * q[ln] + h, n0 + 16 * mt + g[ln]
                            if row < M and col < N:
                                assert np.isnan(C[row, col]), "an element stored twice"
                                C[row, col] = acc[mt, rt, ln, h]
                            if row < M and col + 8 < N:
                                assert np.isnan(C[row, col + 8]), "an element stored twice"
                                C[row, col + 8] = acc[mt, rt, ln, 2 + h]
    return C


EMULATED = [("fem24", 8, 8, 32, 40), ("fem24", 24, 16, 64, 32), ("fem3", 16, 24, 16, 21), ("poor_fill", 8, 32, 32, 45),
            ("ragged_dense", 32, 16, 128, 130), ("empty", 8, 8, 16, 5)]


@pytest.mark.parametrize(("matrix", "BR", "BC", "NT", "N"), EMULATED)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_the_emulated_kernel_computes_a_times_b(matrix, BR, BC, NT, N, dtype):
    problem = problem_of(MATRICES[matrix](), N, dtype, seed=5)
    M, K = problem.symbols["M"], problem.symbols["K"]
    arrays, _ = bsr_blocks(problem, {"BR": BR, "BC": BC})
    C = emulate_kernel(arrays, problem.inputs["B"], dtype, M, K, N, BR, BC, NT)
    assert not np.isnan(C).any(), "an element of C was never stored"
    np.testing.assert_allclose(C, get_family("csr_spmm").reference(problem)["C"], rtol=1e-12, atol=0)


# ---- fp32 by 3xTF32: why the kernel does not offer it ---------------------------------------------------------


def rna_tf32(x: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32: round to 10 mantissa bits, ties away from zero (on the magnitude's bits); NaN kept."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    magnitude = (bits & np.uint32(0x7FFFFFFF)).astype(np.uint64)
    rounded = ((magnitude + 0x1000) & ~np.uint64(0x1FFF)).astype(np.uint32) | (bits & np.uint32(0x80000000))
    return np.where(np.isnan(x), x, rounded.view(np.float32))


LO_SCALE = 2.0**13  # lo parts scaled into tf32's normal range: every fp32 bit below hi is then representable


def split_3xtf32(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x = hi + lo / LO_SCALE with hi and lo tf32 (the best a two-term tf32 split can do); lo = 0 where hi is not finite."""
    hi = rna_tf32(x)
    finite = np.isfinite(hi)
    lo = rna_tf32(np.where(finite, (x - np.where(finite, hi, 0)) * np.float32(LO_SCALE), 0).astype(np.float32))
    return hi, lo


def ratio_to_bound_3xtf32(problem: Problem) -> np.ndarray:
    """|C - ref| / element_bound per element for C = hi*hi + (hi*lo + lo*hi) / LO_SCALE, every product exact and
    summed exactly in float64 before one rounding to fp32: only the split's own error is left."""
    family = get_family("csr_spmm")
    s = problem.symbols
    a_hi, a_lo = split_3xtf32(problem.inputs["values"])
    b_hi, b_lo = (v.astype(np.float64) for v in split_3xtf32(problem.inputs["B"]))

    def A(v: np.ndarray) -> sp.csr_matrix:
        return sp.csr_matrix((v.astype(np.float64), problem.inputs["colind"], problem.inputs["rowptr"]), shape=(s["M"], s["K"]))

    C = (A(a_hi) @ b_hi + (A(a_hi) @ b_lo + A(a_lo) @ b_hi) / LO_SCALE).astype(np.float32).astype(np.float64)
    refs = family.reference(problem)
    bound = family.error_bounds(problem, refs)["C"].bound
    return np.abs(C - refs["C"]) / bound


def without_subnormals(problem: Problem) -> Problem:
    """The same draws with every fp32-subnormal value scaled by 2^40 into the normal range."""
    return problem.mapped(lambda name, v, d: np.where(np.abs(v) < 2.0**-126, v * 2.0**40, v))


def test_3xtf32_misses_the_bound_where_a_factor_is_subnormal():
    """tf32 keeps fp32's exponent range: a subnormal factor's hi has fewer than 11 bits, so hi + lo hold fewer than
    the 22 its normal product needs. One term: a = 163.1, b = 1.9e-40 (both in the family's draws)."""
    A = sp.csr_matrix(([1.0], [0], [0, 1]), shape=(1, 1))
    problem = problem_of(A, 1, "fp32")
    problem.inputs["values"][:] = np.float32(-163.0985)
    problem.inputs["B"][:] = np.float32(1.9175e-40)
    assert ratio_to_bound_3xtf32(problem).max() > 4
    # the family's own draws on a FEM matrix of 4 x 4 blocks (about 28 nonzeros a row): in some of a few value
    # sets the subnormal runs alone push elements past the bound; rows of 24 x 24 blocks (about 170 nonzeros)
    # still keep a wide margin
    drawn = [problem_of(fem(4, 8), 16, "fp32", seed=seed) for seed in range(4)]
    assert max(ratio_to_bound_3xtf32(p).max() for p in drawn) > 1
    assert max(ratio_to_bound_3xtf32(without_subnormals(p)).max() for p in drawn) < 0.5
    assert ratio_to_bound_3xtf32(problem_of(fem(24, 3), 16, "fp32", seed=0)).max() < 0.1
    # single-term elements in the normal range keep little margin (worst case 8u against 2(1 + 2)u + u)
    single = problem_of(sp.random(400, 300, density=0.01, format="csr", random_state=0), 32, "fp32", seed=0)
    assert 0.5 < ratio_to_bound_3xtf32(without_subnormals(single)).max() < 1


def test_the_kernel_does_not_declare_fp32():
    assert _kernel().dtypes == ("fp16", "bf16")


# ---- compile-only verification ------------------------------------------------------------------------------


def _kernel():
    return next(k for k in reference_kernels() if k.name == "spmm_bsr_tc")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_bsr_kernel_compiles_and_passes_the_compile_only_verifier(dtype):
    kernel = _kernel()
    assert kernel.preparation == "bsr_blocks"
    spec = parse_spec({"operation": "spmm", "pattern": {"density": 0.05}, "M": 1000, "K": 700, "N": 64, "dtype": dtype,
                       "arch": "sm_90"})
    for params in ({"BR": 8, "BC": 8, "NT": 32, "WARPS": 4}, {"BR": 24, "BC": 16, "NT": 64, "WARPS": 2},
                   {"BR": 16, "BC": 32, "NT": 64, "WARPS": 8}):
        report = verify_compile_only(kernel.instantiate(params), spec, ("spmm_bsr_tc",))
        counts = report.sass["spmm_bsr_tc"]
        assert counts.tensor_core and not counts.local_loads + counts.local_stores
