"""Merge-path SpMV (spmv_merge_path) on the CPU: the preparation's tile coordinates are the merge of the row ends
with the nonzero indices, its fix-up list is exactly the rows that cross a tile boundary, a NumPy emulation of both
launches (the kernel's search, walk, segmented shuffle scan, stores and fix-up, thread by thread) writes every y
once and gives y = A x, and the kernel compiles and passes the compile-only verifier in every dtype."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.dtypes import to_float64
from sparseditto.tools.families import get_family
from sparseditto.tools.families.base import Problem
from sparseditto.tools.families.csr_spmv.merge_path import merge_coordinates, merge_path
from sparseditto.tools.generators import generate

from compile_checks import verify_compile_only
from spmv_problems import problem_of


def from_lengths(lengths, K: int, seed: int = 0) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, dtype=np.int64)
    rowptr = np.concatenate([[0], np.cumsum(lengths)])
    cols = [np.sort(rng.choice(K, size=n, replace=False)) for n in lengths]
    colind = np.concatenate([*cols, np.zeros(0, np.int64)])
    return sp.csr_matrix((np.ones(len(colind), np.float32), colind, rowptr), shape=(len(lengths), K))


def huge_row(M: int = 40, K: int = 9000, row: int = 17, length: int = 7000) -> sp.csr_matrix:
    """Short rows around one row that spans many tiles."""
    lengths = np.full(M, 3)
    lengths[row] = length
    return from_lengths(lengths, K, seed=3)


CASES = {
    "empty_rows": from_lengths([0, 0, 5, 0, 0, 0, 9, 0, 1, 0] * 30, 50),
    "huge_row": huge_row(),
    "huge_first_and_last_rows": from_lengths([3000] + [2] * 100 + [2500], 4000, seed=4),
    "rectangular_wide": from_lengths(np.random.default_rng(5).integers(0, 40, 120), 5000, seed=5),
    "rectangular_tall": from_lengths(np.random.default_rng(6).integers(0, 4, 900), 30, seed=6),
    "all_empty": sp.csr_matrix((70, 10)),
    "one_row": from_lengths([600], 700),
    "power_law_graph": generate("power_law_graph", 20000, seed=1),
    "circuit": generate("circuit", 20000, seed=2),
    "empty_rows_mix": generate("empty_rows_mix", 6000, seed=3),
    "lp_rectangular": generate("lp_rectangular", 6000, seed=4),
}
PARAMS = [{"BLOCK": 128, "ITEMS": 4, "HINT": 1, "EARLY": 0}, {"BLOCK": 256, "ITEMS": 8, "HINT": 0, "EARLY": 1},
          {"BLOCK": 128, "ITEMS": 16, "HINT": 1, "EARLY": 0}]


def brute_merge(rowptr: np.ndarray) -> list[tuple[int, int]]:
    """The merge walked item by item: (rows ended, nonzeros consumed) after every prefix, 0 .. M + nnz items."""
    M, nnz = len(rowptr) - 1, int(rowptr[-1])
    i = j = 0
    coords = [(0, 0)]
    while i < M or j < nnz:
        if i < M and rowptr[i + 1] <= j:
            i += 1
        else:
            j += 1
        coords.append((i, j))
    return coords


@pytest.mark.parametrize("case", ["empty_rows", "huge_row", "rectangular_tall", "all_empty", "one_row", "circuit"])
def test_merge_coordinates_follow_the_merge_item_by_item(case):
    rowptr = CASES[case].indptr.astype(np.int64)
    coords = brute_merge(rowptr)
    rows, nz = merge_coordinates(rowptr, np.arange(len(coords)))
    assert list(zip(rows.tolist(), nz.tolist())) == coords


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"{p['BLOCK']}x{p['ITEMS']}")
@pytest.mark.parametrize("case", list(CASES))
def test_tiles_cover_the_merge_and_the_fix_list_is_the_rows_crossing_a_boundary(case, params):
    mat = CASES[case]
    rowptr = mat.indptr.astype(np.int64)
    M, nnz = mat.shape[0], mat.nnz
    tile = params["BLOCK"] * params["ITEMS"]
    arrays, symbols = merge_path(problem_of(mat), params)
    n_tiles, n_fix = symbols["n_tiles"], symbols["n_fix"]
    row, nz = arrays["tile_row"], arrays["tile_nz"]
    assert all(a.dtype == np.int32 and len(a) >= 1 for a in arrays.values())
    assert n_tiles == max(1, -(-(M + nnz) // tile)) and len(row) == len(nz) == n_tiles + 1
    assert (row[0], nz[0]) == (0, 0) and (row[-1], nz[-1]) == (M, nnz)
    coords = brute_merge(rowptr)
    for b in range(n_tiles + 1):
        assert (row[b], nz[b]) == coords[min(b * tile, M + nnz)]
    # the brute-force fix list: tiles whose first row ends in them and has nonzeros in an earlier tile
    expected = [b for b in range(n_tiles) if row[b] < row[b + 1] and rowptr[row[b]] < nz[b]]
    assert arrays["fix_tile"][:n_fix].tolist() == expected
    for f, b in enumerate(expected):
        first = int(arrays["fix_first"][f])
        assert first < b and (row[first + 1:b + 1] == row[b]).all() and (first == 0 or row[first] < row[b])
        assert rowptr[row[b]] >= nz[first]  # the row begins in tile `first`: no earlier tile holds its nonzeros
    if case == "huge_row" and tile == 512:
        assert n_fix >= 1 and int(arrays["fix_first"][0]) < expected[0] - 5  # the long row spans many tiles


def emulate(problem: Problem, arrays, symbols, params):
    """Both launches over the prepared tiles, thread by thread as the kernel indexes them (fp32 arithmetic in the
    kernel's order). Returns y and, per row, how many times it was stored."""
    BLOCK, ITEMS = params["BLOCK"], params["ITEMS"]
    rowptr, colind = problem.inputs["rowptr"], problem.inputs["colind"]
    vals = to_float64(problem.inputs["values"], problem.dtype).astype(np.float32)
    x = to_float64(problem.inputs["x"], problem.dtype).astype(np.float32)
    M = len(rowptr) - 1
    n_tiles = symbols["n_tiles"]
    y = np.full(M, np.nan, np.float32)
    stores = np.zeros(M, np.int64)
    carry = np.full(n_tiles, np.nan, np.float32)
    head = np.full(n_tiles, np.nan, np.float32)
    head_tiles = []
    for b in range(n_tiles):
        i0, i1 = int(arrays["tile_row"][b]), int(arrays["tile_row"][b + 1])
        j0, j1 = int(arrays["tile_nz"][b]), int(arrays["tile_nz"][b + 1])
        n_rows, n_nz = i1 - i0, j1 - j0
        s_end = np.array([rowptr[i0 + r + 1] - j0 if i0 + r < M else n_nz for r in range(n_rows + 1)], np.int64)
        s_val = np.full(BLOCK * ITEMS, np.nan, np.float32)
        # products: thread t's aligned quads (j0 & ~3) + 4 t + 8 BLOCK s and BLOCK quads further, masked to [j0, j1)
        for t in range(BLOCK):
            for a in range((j0 & ~3) + 4 * t, j1, 8 * BLOCK):
                for aa in (a, a + 4 * BLOCK):
                    for k in range(aa, min(aa + 4, j1)) if aa < j1 else ():
                        if k >= j0:
                            assert np.isnan(s_val[k - j0])
                            s_val[k - j0] = np.float32(vals[k] * x[colind[k]])
        assert not np.isnan(s_val[:n_nz]).any()
        items = n_rows + n_nz
        keys, accs, starts = np.zeros(BLOCK, np.int64), np.zeros(BLOCK, np.float32), np.zeros(BLOCK, np.int64)
        for t in range(BLOCK):
            d = min(t * ITEMS, items)
            count = min(d + ITEMS, items) - d
            lo, hi = max(0, d - n_nz), min(d, n_rows)
            while lo < hi:
                mid = (lo + hi) >> 1
                if s_end[mid] <= d - mid - 1:
                    lo = mid + 1
                else:
                    hi = mid
            i, j, acc = lo, d - lo, np.float32(0)
            starts[t] = lo
            for _ in range(count):
                if s_end[i] <= j:
                    assert np.isnan(s_val[n_nz + i]) and n_nz + i < BLOCK * ITEMS  # its own slot, once
                    s_val[n_nz + i] = acc
                    acc, i = np.float32(0), i + 1
                else:
                    assert j < n_nz and not np.isnan(s_val[j])
                    acc, j = np.float32(acc + s_val[j]), j + 1
            keys[t], accs[t] = i, acc
        assert keys[-1] == n_rows  # the last thread stops at the tile's end: its scan value is the open row's
        # warp shuffles: Hillis-Steele inclusive scan, a lane adds what it reads when the keys agree
        incl = accs.copy()
        for w in range(BLOCK // 32):
            k, v = keys[32 * w:32 * w + 32], incl[32 * w:32 * w + 32]
            for off in (1, 2, 4, 8, 16):
                up_k, up_v = np.roll(k, off), np.roll(v, off)
                add = (np.arange(32) >= off) & (up_k == k)
                v = np.where(add, v + up_v, v).astype(np.float32)
            incl[32 * w:32 * w + 32] = v
        wkey, wval = keys[31::32], incl[31::32].copy()
        wfull = keys[0::32] == keys[31::32]
        for t in range(BLOCK):
            w = t // 32
            if keys[32 * w] != keys[t]:
                continue
            pre = np.float32(0)
            for u in range(w - 1, -1, -1):
                if wkey[u] != keys[t]:
                    break
                pre = np.float32(pre + wval[u])
                if not wfull[u]:
                    break
            incl[t] = np.float32(incl[t] + pre)
        for t in range(1, BLOCK):
            if keys[t] > starts[t]:
                s_val[n_nz + starts[t]] = np.float32(s_val[n_nz + starts[t]] + incl[t - 1])
        is_head = n_rows > 0 and rowptr[i0] < j0
        for r in range(n_rows):
            if r == 0 and is_head:
                head[b] = s_val[n_nz]
                head_tiles.append(b)
            else:
                y[i0 + r] = s_val[n_nz + r]
                stores[i0 + r] += 1
        carry[b] = incl[BLOCK - 1]
    # the kernel's own head test is the preparation's fix list
    assert head_tiles == arrays["fix_tile"][:symbols["n_fix"]].tolist()
    for f in range(symbols["n_fix"]):
        b, first = int(arrays["fix_tile"][f]), int(arrays["fix_first"][f])
        lanes = np.zeros(32, np.float32)
        for t in range(first, b):
            lanes[(t - first) % 32] = np.float32(lanes[(t - first) % 32] + carry[t])
        for offset in (16, 8, 4, 2, 1):
            lanes[:offset] = lanes[:offset] + lanes[offset:2 * offset]
        row = int(arrays["tile_row"][b])
        y[row] = np.float32(head[b] + lanes[0])
        stores[row] += 1
    assert not np.isnan(carry).any()
    return y, stores


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"{p['BLOCK']}x{p['ITEMS']}")
@pytest.mark.parametrize("case", list(CASES))
def test_emulated_launches_store_every_row_once_and_give_a_times_x(case, params):
    mat = CASES[case]
    problem = problem_of(mat, seed=11)
    arrays, symbols = merge_path(problem, params)
    y, stores = emulate(problem, arrays, symbols, params)
    assert (stores == 1).all()
    expected = get_family("csr_spmv").reference(problem)["y"]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_emulation_in_16_bit_types_on_the_family_problem(dtype):
    family = get_family("csr_spmv")
    spec = parse_spec({"operation": "spmv", "pattern": {"distribution": "power_law", "nnz_per_row": 9},
                       "M": 700, "K": 500, "dtype": dtype})
    problem = family.make_problem(spec, seed=2)
    params = {"BLOCK": 128, "ITEMS": 4, "HINT": 1, "EARLY": 0}
    arrays, symbols = family.preparations["merge_path"](problem, params)
    y, stores = emulate(problem, arrays, symbols, params)
    assert (stores == 1).all()
    np.testing.assert_allclose(y, family.reference(problem)["y"], rtol=1e-4, atol=1e-4)


def test_the_preparation_depends_on_the_structure_only():
    mat = CASES["circuit"]
    a, sa = merge_path(problem_of(mat, seed=1), PARAMS[0])
    b, sb = merge_path(problem_of(mat, "bf16", seed=2), PARAMS[0])
    assert sa == sb and all((a[k] == b[k]).all() for k in a)


def _spec(dtype: str):
    return parse_spec({"operation": "spmv", "pattern": {"distribution": "power_law", "nnz_per_row": 9},
                       "M": 3000, "K": 2000, "dtype": dtype, "arch": "sm_90"})


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_kernel_compiles_without_spills_and_passes_the_compile_only_verifier(dtype):
    kernel = get_kernel("spmv_merge_path")
    assert kernel.preparation == "merge_path" and "merge_path" in get_family("csr_spmv").preparations
    for params in ({"BLOCK": 256, "ITEMS": 8, "HINT": 1, "EARLY": 0}, {"BLOCK": 512, "ITEMS": 8, "HINT": 0, "EARLY": 1},
                   {"BLOCK": 128, "ITEMS": 16, "HINT": 1, "EARLY": 1}):
        assert kernel.violated(params, {}, dtype) is None
        report = verify_compile_only(kernel.instantiate(params), _spec(dtype), ("spmv_merge_tiles", "spmv_merge_fixup"))
        assert report.resources["spmv_merge_tiles"].shared_bytes <= 48 * 1024
    assert not [f for f in report.feedback if f.status in {"failed", "error"}], report.feedback


def test_a_tile_too_large_for_static_shared_memory_is_refused_by_the_constraint():
    assert get_kernel("spmv_merge_path").violated({"BLOCK": 512, "ITEMS": 16, "HINT": 1, "EARLY": 0}, {}, "fp32") is not None
