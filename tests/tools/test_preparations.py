"""One-time format preparations: long-row chunks cover every long row exactly; row-group unions hold every\ncolumn of their 8 rows once, and each nonzero's slot points at its column."""

from __future__ import annotations

import numpy as np
import pytest

from sparseditto.tools.dtypes import to_storage
from sparseditto.tools.families import get_family
from sparseditto.tools.families.base import Output, Problem
from sparseditto.tools.families.csr_spmm.preparations import row_group_union
from sparseditto.tools.families.csr_spmv.preparations import long_row_chunk_ptr


def csr_problem(lengths, dtype="fp32", seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, dtype=np.int64)
    K = int(max(lengths.max(), 1))
    rowptr = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=rowptr[1:])
    nnz = int(rowptr[-1])
    colind = np.concatenate([np.sort(rng.choice(K, size=n, replace=False)) for n in lengths]).astype(np.int32)
    values = to_storage(rng.uniform(-1, 1, size=nnz).astype(np.float32), dtype)
    return Problem(dtype=dtype, symbols={"M": len(lengths), "K": K, "N": 1, "nnz": nnz},
                   inputs={"rowptr": rowptr, "colind": colind, "values": values, "x": np.ones(K, np.float32)},
                   input_dtypes={"rowptr": "int32", "colind": "int32", "values": dtype, "x": "fp32"},
                   outputs={"y": Output((len(lengths),), dtype, 1e-5)})


LENGTHS = [3, 100, 0, 1000, 65, 64, 129, 7]


@pytest.mark.parametrize(("long_row", "chunk"), [(64, 64), (64, 512), (32, 100), (128, 256)])
def test_long_row_chunks_cover_each_long_row_exactly(long_row, chunk):
    problem = csr_problem(LENGTHS)
    rowptr = problem.inputs["rowptr"]
    arrays, symbols = long_row_chunk_ptr(problem, {"LONG_ROW": long_row, "CHUNK": chunk})

    expected_long = [i for i, n in enumerate(LENGTHS) if n > long_row]
    assert symbols["n_long_rows"] == len(expected_long)
    assert arrays["long_rows"][: len(expected_long)].tolist() == expected_long
    n_chunks = symbols["n_long_chunks"]
    assert n_chunks == sum(-(-LENGTHS[r] // chunk) for r in expected_long)

    index = arrays["chunk_long_index"][:n_chunks]
    start = arrays["chunk_start"][:n_chunks]
    for i, row in enumerate(expected_long):
        begin, end = int(rowptr[row]), int(rowptr[row + 1])
        covered = []
        for s in sorted(start[index == i].tolist()):
            covered.extend(range(s, min(s + chunk, end)))
        assert covered == list(range(begin, end)), f"row {row}"
    for arr in arrays.values():
        assert arr.dtype == np.int32


def test_long_row_chunks_without_long_rows_pads_arrays():
    problem = csr_problem([3, 5, 2])
    arrays, symbols = long_row_chunk_ptr(problem, {"LONG_ROW": 64, "CHUNK": 256})
    assert symbols == {"n_long_rows": 0, "n_long_chunks": 0, "n_multi_rows": 0}
    # kernels still get a valid (one-element) buffer for each array
    assert all(len(a) == 1 for a in arrays.values())


def test_long_row_chunk_ptr_gives_each_long_row_its_chunks():
    problem = csr_problem(LENGTHS)
    arrays, symbols = long_row_chunk_ptr(problem, {"LONG_ROW": 64, "CHUNK": 64})
    ptr = arrays["long_chunk_ptr"]
    n_long = symbols["n_long_rows"]
    assert len(ptr) == n_long + 1
    assert ptr[0] == 0 and ptr[-1] == symbols["n_long_chunks"]
    index = arrays["chunk_long_index"]
    for i in range(n_long):
        assert (index[ptr[i]:ptr[i + 1]] == i).all()


@pytest.mark.parametrize("lengths", [LENGTHS, [0, 0, 0], [5] * 17, [1000, 3, 0, 2, 64, 9, 9, 9, 40]])
def test_row_group_union_holds_each_groups_columns_once_and_slots_point_at_them(lengths):
    problem = csr_problem(lengths)
    rowptr, colind = problem.inputs["rowptr"], problem.inputs["colind"]
    arrays, symbols = row_group_union(problem, {})
    ptr, cols, pos = arrays["group_ptr"], arrays["group_cols"], arrays["nnz_tile_pos"]
    stride = symbols["max_union"] + 8
    rows = np.repeat(np.arange(len(lengths)), lengths)
    assert symbols["n_groups"] == -(-len(lengths) // 8) and len(ptr) == symbols["n_groups"] + 1
    for g in range(symbols["n_groups"]):
        lo, hi = rowptr[8 * g], rowptr[min(8 * g + 8, len(lengths))]
        union = np.unique(colind[lo:hi])
        segment = cols[ptr[g]:ptr[g + 1]]
        assert len(segment) % 16 == 0 and len(segment) - len(union) < 16
        assert (segment[: len(union)] == union).all()
        assert (segment[len(union):] == (union[-1] if len(union) else 0)).all()  # padding repeats a real column
        assert (pos[lo:hi] // stride == rows[lo:hi] % 8).all()
        assert (segment[pos[lo:hi] % stride] == colind[lo:hi]).all()
    assert symbols["max_union"] == max(int(np.diff(ptr).max()), 0)
    for arr in arrays.values():
        assert arr.dtype == np.int32


def test_every_preparation_named_by_a_reference_kernel_exists():
    from sparseditto.knowledge_base.library import reference_kernels

    for kernel in reference_kernels():
        if kernel.preparation:
            assert kernel.preparation in get_family(kernel.family).preparations, kernel.name
