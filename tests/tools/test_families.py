"""Problem families: inputs in storage types, exact references, held-out shapes, bf16 rounding."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sparseditto.spec import parse_spec
from sparseditto.tools.dtypes import to_float64, to_storage
from sparseditto.tools.families import get_family


def spec_for(operation, dtype, **extra):
    base = {"operation": operation, "pattern": {"distribution": "uniform", "nnz_per_row": 3}, "M": 17, "K": 13, "dtype": dtype}
    if operation == "spmm":
        base["N"] = 5
    return parse_spec({**base, **extra})


def dense_from_inputs(inputs, dtype, M, K):
    """A dense float64 copy of the CSR inputs, built element by element."""
    A = np.zeros((M, K))
    rowptr, colind = inputs["rowptr"], inputs["colind"]
    values = to_float64(inputs["values"], dtype)
    for r in range(M):
        for j in range(rowptr[r], rowptr[r + 1]):
            A[r, colind[j]] += values[j]
    return A


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_spmm_reference_equals_the_dense_product(dtype):
    spec = spec_for("spmm", dtype)
    family = get_family("csr_spmm")
    problem = family.make_problem(spec, seed=7)
    assert list(problem.outputs) == ["C"] and problem.outputs["C"].shape == (17, 5)
    A = dense_from_inputs(problem.inputs, dtype, 17, 13)
    B = to_float64(problem.inputs["B"], dtype)
    assert B.shape == (13, 5)
    ref = family.reference(problem)["C"]
    assert ref.shape == (17, 5)
    np.testing.assert_allclose(ref, A @ B, rtol=1e-12, atol=1e-12)
    assert np.abs(ref).sum() > 0


@pytest.mark.parametrize(("operation", "n"), [("spmm", 96), ("spmv", None)])
def test_the_reference_by_blocks_of_rows_on_threads_is_the_one_call_product(operation, n, monkeypatch):
    """Blocks of a few rows (many threads' worth), empty rows at a block's edge included: every element the same as
    SciPy's product in one call, for the reference and for |A| |B|."""
    import scipy.sparse as sp

    from sparseditto.tools import chunks

    blocks = []
    by_rows = chunks.in_row_blocks

    def small_blocks(shape, work, elements=chunks.CHUNK):
        def counted(i, start, stop):
            blocks.append((start, stop))
            work(i, start, stop)
        by_rows(shape, counted, 50 * (n or 1))  # blocks of 50 rows

    monkeypatch.setattr(chunks, "in_row_blocks", small_blocks)
    spec = parse_spec({"operation": operation, "pattern": {"distribution": "power_law", "nnz_per_row": 6},
                       "M": 1001, "K": 777, "dtype": "fp32", **({"N": n} if n else {})})
    family = get_family(f"csr_{operation}")
    drawn = family.make_problem(spec, seed=3)
    rowptr, colind, values = (drawn.inputs[k] for k in ("rowptr", "colind", "values"))
    lengths = np.diff(rowptr)
    lengths[60:200] = 0  # rows 60 .. 199 emptied
    kept = np.repeat((np.arange(1001) < 60) | (np.arange(1001) >= 200), np.diff(rowptr))
    rowptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    problem = dataclasses.replace(drawn, inputs={**drawn.inputs, "rowptr": rowptr, "colind": colind[kept],
                                                 "values": values[kept]})
    dense_name, out_name = ("B", "C") if n else ("x", "y")
    values, dense = to_float64(problem.inputs["values"], "fp32"), to_float64(problem.inputs[dense_name], "fp32")
    A = sp.csr_matrix((values, problem.inputs["colind"], rowptr), shape=(1001, 777))
    assert np.array_equal(family.reference(problem)[out_name], A @ dense)
    assert np.array_equal(family.conditions(problem)[out_name], abs(A) @ np.abs(dense))
    assert len(blocks) == 2 * 21 and (150, 200) in blocks and (200, 250) in blocks


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_spmv_reference_equals_the_dense_product(dtype):
    spec = spec_for("spmv", dtype)
    family = get_family("csr_spmv")
    problem = family.make_problem(spec, seed=11)
    assert list(problem.outputs) == ["y"] and problem.outputs["y"].shape == (17,)
    A = dense_from_inputs(problem.inputs, dtype, 17, 13)
    x = to_float64(problem.inputs["x"], dtype)
    np.testing.assert_allclose(family.reference(problem)["y"], A @ x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("dtype", "storage"), [("fp32", np.float32), ("fp16", np.float16), ("bf16", np.uint16)])
def test_inputs_come_in_storage_types(dtype, storage):
    problem = get_family("csr_spmm").make_problem(spec_for("spmm", dtype), seed=0)
    assert problem.inputs["rowptr"].dtype == np.int32
    assert problem.inputs["colind"].dtype == np.int32
    assert problem.inputs["values"].dtype == storage
    assert problem.inputs["B"].dtype == storage


def test_fresh_seeds_give_fresh_inputs_and_the_same_seed_the_same():
    family = get_family("csr_spmm")
    spec = spec_for("spmm", "fp32")
    a, b, c = (family.make_problem(spec, seed=s) for s in (1, 1, 2))
    assert np.array_equal(a.inputs["values"], b.inputs["values"])
    assert np.array_equal(a.inputs["B"], b.inputs["B"])
    assert not np.array_equal(a.inputs["B"], c.inputs["B"])


@pytest.mark.parametrize("family_name", ["csr_spmm", "csr_spmv"])
def test_held_out_shapes_differ_from_the_main_shape(family_name, examples_dir):
    from sparseditto.spec import load_spec

    for path in sorted(examples_dir.glob("*.yaml")):
        spec = load_spec(path)
        if spec.family != family_name:
            continue
        family = get_family(family_name)
        main = family.symbols(spec)
        shapes = family.held_out_shapes(spec, np.random.default_rng(0))
        assert shapes, path.name
        for shape in shapes:
            for dim in ("M", "K", "N") if family_name == "csr_spmm" else ("M", "K"):
                assert shape[dim] != main[dim], (path.name, dim)
                assert shape[dim] >= 1


def test_held_out_problem_has_the_held_out_shape():
    spec = parse_spec({"operation": "spmm", "pattern": {"density": 0.05}, "M": 64, "K": 64, "N": 32})
    family = get_family("csr_spmm")
    shapes = family.held_out_shapes(spec, np.random.default_rng(5))
    assert len(shapes) >= 2  # several per verification
    for shape in shapes:
        problem = family.make_problem(spec, seed=3, shape=shape)
        assert problem.outputs["C"].shape == (shape["M"], shape["N"])
        assert problem.inputs["B"].shape == (shape["K"], shape["N"])
        assert len(problem.inputs["rowptr"]) == shape["M"] + 1
        assert problem.inputs["colind"].max() < shape["K"]


def test_bf16_storage_rounds_to_nearest_even():
    values = np.array([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -2.5, 0.0], dtype=np.float32)
    bits = to_storage(values, "bf16")
    assert bits.dtype == np.uint16
    assert bits.tolist() == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x0000]
    assert to_float64(bits, "bf16").tolist() == [1.0, 1.0, 1.0 + 2.0**-6, -2.5, 0.0]


def test_tolerances_are_looser_for_narrower_types():
    for name in ("csr_spmm", "csr_spmv"):
        op = name.removeprefix("csr_")
        tol = {d: next(iter(get_family(name).make_problem(spec_for(op, d), seed=0).outputs.values())).tolerance
               for d in ("fp32", "fp16", "bf16")}
        assert tol["fp32"] < tol["fp16"] < tol["bf16"] < 0.1


def test_held_out_shapes_are_drawn_per_verification():
    spec = parse_spec({"operation": "spmm", "pattern": {"density": 0.05}, "M": 640, "K": 640, "N": 32})
    family = get_family("csr_spmm")
    drawn = {tuple(family.held_out_shapes(spec, np.random.default_rng(seed))[0].values()) for seed in range(20)}
    assert len(drawn) > 5


def test_min_bytes_and_flops_count_each_operand_once():
    fam = get_family("csr_spmm")
    s = {"M": 100, "K": 50, "N": 8, "nnz": 400}
    assert fam.flops(s) == 2 * 400 * 8
    assert fam.min_bytes(s, "fp32") == 4 * 101 + 400 * 8 + (50 + 100) * 8 * 4
    assert fam.min_bytes(s, "fp16") == 4 * 101 + 400 * 6 + (50 + 100) * 8 * 2


def test_sanitizer_instances_reach_the_longest_rows_and_both_ends():
    """The sanitizer runs where a kernel branches on row length: a slice of the main matrix keeps its longest
    rows (lengths, columns and values), its first and last rows; the tails instance is not a multiple of a tile."""
    spec = parse_spec({"operation": "spmm", "pattern": {"distribution": "power_law", "nnz_per_row": 8},
                       "M": 20000, "K": 3000, "N": 64})
    family = get_family("csr_spmm")
    main = family.make_problem(spec, seed=4)
    instances = family.sanitizer_instances(spec, main, seed=9)
    tails, sliced = instances["tails"], instances["longest_rows"]
    assert tails.symbols["M"] % 2 and tails.symbols["N"] % 2
    main_lengths = np.diff(main.inputs["rowptr"])
    sliced_lengths = np.diff(sliced.inputs["rowptr"])
    assert sliced_lengths.max() == main_lengths.max()
    assert sorted(sliced_lengths)[-64:] == sorted(main_lengths)[-64:]
    assert 4096 <= sliced.symbols["M"] < main.symbols["M"] and sliced.symbols["N"] == 64
    assert sliced.inputs["B"] is main.inputs["B"] and sliced.symbols["nnz"] == len(sliced.inputs["colind"])
    assert sliced.outputs["C"].shape == (sliced.symbols["M"], 64)
    first = main.inputs["colind"][: main.inputs["rowptr"][1]]
    assert np.array_equal(sliced.inputs["colind"][: sliced.inputs["rowptr"][1]], first)
    last = main.inputs["colind"][main.inputs["rowptr"][-2]:]
    assert np.array_equal(sliced.inputs["colind"][sliced.inputs["rowptr"][-2]:], last)


def test_column_sharing_estimated_on_sampled_row_groups_matches_the_whole_matrix():
    """Planning estimates group_overlap on sampled bands of 32 rows (seconds saved on tens of millions of
    nonzeros); on a banded matrix, where neighbouring rows share columns, it matches the whole matrix's value."""
    from sparseditto.tools.families.csr_spmm.preparations import row_group_keys
    from sparseditto.tools.matrices import generate_csr

    spec = parse_spec({"operation": "spmm", "pattern": {"distribution": "banded", "nnz_per_row": 12},
                       "M": 300_000, "K": 300_000, "N": 64})
    matrix = generate_csr(spec.pattern, 300_000, 300_000, np.float32, np.random.default_rng(2))
    whole = matrix.nnz / len(row_group_keys(matrix.indptr, matrix.indices)[1])
    estimate = get_family("csr_spmm").features(spec)["group_overlap"]
    assert whole > 2 and abs(estimate - whole) / whole < 0.01


def test_every_family_example_spec_is_a_valid_spec_of_that_family():
    from sparseditto.tools.families import families

    examples = {name: f.example_spec for name, f in families().items() if f.example_spec}
    assert {"csr_spmm", "csr_spmv"} <= set(examples)
    for name, example in examples.items():
        assert parse_spec(dict(example)).family == name
