"""The baseline registry on a machine without a GPU: library names per family, clean errors, the configurations
each library offers, operand checks, and no GPU library imported by importing the package."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from sparseditto.spec import parse_spec
from sparseditto.tools import baselines
from sparseditto.tools.baselines import (
    Candidate, UnknownBaseline, baseline_calls, candidates, cublas, libraries_for, register, torch_sparse,
)
from sparseditto.tools.families import get_family

CUSPARSE_SPMV = [f"cusparse_spmv_{alg}{pre}" for alg in ("default", "csr_alg1", "csr_alg2") for pre in ("", "_pre")]
CUSPARSE_SPMM = [
    f"cusparse_spmm_{alg}_{layout}{pre}"
    for alg in ("default", "csr_alg1", "csr_alg2", "csr_alg3") for layout in ("row", "col")
    for pre in (("", "_pre") if alg in ("csr_alg1", "csr_alg3") else ("",))
]
TORCH_SPMV = [f"torch_csr_spmv_{form}_i{bits}" for bits in (32, 64) for form in ("mv", "mm")]
TORCH_SPMM = ["torch_csr_spmm_i32", "torch_csr_spmm_i64"]


def problem_for(operation: str, dtype: str):
    spec = {"operation": operation, "pattern": {"distribution": "uniform", "nnz_per_row": 3}, "M": 17, "K": 13,
            "dtype": dtype, **({"N": 5} if operation == "spmm" else {})}
    return get_family(f"csr_{operation}").make_problem(parse_spec(spec), seed=3)


@pytest.fixture
def torch_present(monkeypatch):
    """Candidates are only named, never built, so any object stands in for torch."""
    for module in (torch_sparse, cublas):
        monkeypatch.setattr(module, "torch_module", lambda: object())


@pytest.fixture
def private_registry(monkeypatch):
    monkeypatch.setattr(baselines, "_BUILDERS", {})


def test_every_csr_family_has_the_three_libraries_in_a_stable_order():
    for family in ("csr_spmv", "csr_spmm"):
        assert libraries_for(family) == ("cusparse", "torch_sparse", "cublas")


def test_a_family_without_baselines_has_no_libraries():
    assert libraries_for("no_such_family") == ()


def test_an_unknown_library_is_refused_before_anything_is_built():
    problem = problem_for("spmv", "fp32")
    with pytest.raises(UnknownBaseline, match=r"'cusparselt' for family 'csr_spmv'; registered: cusparse, torch_sparse"):
        baseline_calls("csr_spmv", ["cusparse", "cusparselt"], problem, {})
    with pytest.raises(UnknownBaseline, match="family 'no_such_family'; registered: none"):
        baseline_calls("no_such_family", ["cusparse"], problem, {})
    assert issubclass(UnknownBaseline, ValueError)


def test_importing_the_package_imports_no_gpu_library():
    code = ("import sys; import sparseditto.tools.baselines as b; "
            "import sparseditto.tools.baselines.cusparse, sparseditto.tools.baselines.torch_sparse, "
            "sparseditto.tools.baselines.cublas, sparseditto.tools.baselines.csr; "
            "assert b.libraries_for('csr_spmm'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('cupy', 'cupyx', 'cupy_backends', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("operation", "dtype", "expected"), [
    ("spmv", "fp32", CUSPARSE_SPMV + TORCH_SPMV
     + ["cublas_dense_gemv_cupy_matmul", "cublas_dense_sgemv_cupy", "cublas_dense_gemv_torch"]),
    ("spmv", "fp16", CUSPARSE_SPMV + TORCH_SPMV + ["cublas_dense_gemv_cupy_matmul", "cublas_dense_gemv_torch"]),
    ("spmv", "bf16", CUSPARSE_SPMV + TORCH_SPMV + ["cublas_dense_gemv_torch"]),
    ("spmm", "fp32", CUSPARSE_SPMM + TORCH_SPMM + ["cublas_dense_gemm_cupy", "cublas_dense_gemm_torch"]),
    ("spmm", "bf16", CUSPARSE_SPMM + TORCH_SPMM + ["cublas_dense_gemm_torch"]),
])
def test_each_family_and_dtype_offers_every_configuration(torch_present, operation, dtype, expected):
    problem = problem_for(operation, dtype)
    offered = candidates(f"csr_{operation}", (), problem, problem.inputs)
    assert [c.name for c in offered] == expected
    torch_variants = [len(c.variants) for c in offered if c.name.startswith("torch_csr")]
    assert torch_variants == [2] * len(torch_variants)  # out= first, then a copy into the output


def test_the_named_libraries_only(torch_present):
    problem = problem_for("spmm", "fp16")
    offered = candidates("csr_spmm", ["cublas", "cusparse"], problem, problem.inputs)
    assert [c.name for c in offered] == CUSPARSE_SPMM + ["cublas_dense_gemm_cupy", "cublas_dense_gemm_torch"]


def test_without_torch_its_configurations_are_not_offered(monkeypatch):
    for module in (torch_sparse, cublas):
        monkeypatch.setattr(module, "torch_module", lambda: None)
    problem = problem_for("spmm", "fp32")
    assert candidates("csr_spmm", ["torch_sparse"], problem, problem.inputs) == []
    assert [c.name for c in candidates("csr_spmm", ["cublas"], problem, problem.inputs)] == ["cublas_dense_gemm_cupy"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda p, d: d.update(values=d["values"].astype(np.float64)), "fp32 expects float32 storage"),
    (lambda p, d: d.update(B=np.asfortranarray(d["B"])), "C-contiguous with shape"),
    (lambda p, d: d.update(B=d["B"][:, :2].copy()), r"shape \(13, 5\), got \(13, 2\)"),
    (lambda p, d: setattr(p, "dtype", "fp8_e4m3"), "no CSR baseline for dtype 'fp8_e4m3'"),
])
def test_mismatched_operands_are_refused_not_copied(change, message):
    problem = problem_for("spmm", "fp32")
    device = dict(problem.inputs)
    change(problem, device)
    for library in libraries_for("csr_spmm"):
        with pytest.raises(ValueError, match=message):
            candidates("csr_spmm", [library], problem, device)


def test_a_registered_builder_gets_the_problem_and_device_and_its_rejected_configurations_are_dropped(private_registry):
    seen = []

    def rejected() -> None:
        raise RuntimeError("unsupported here")

    @register("demo", "lib_a")
    def offer_a(problem, device):
        seen.append(("lib_a", problem, device))
        return [Candidate("a_only", (rejected,))]

    @register("demo", "lib_b")
    def offer_b(problem, device):
        seen.append(("lib_b", problem, device))
        return []

    assert libraries_for("demo") == ("lib_a", "lib_b")
    assert baseline_calls("demo", ["lib_b"], "P", {"x": 1}) == [] and seen == [("lib_b", "P", {"x": 1})]
    seen.clear()
    assert baseline_calls("demo", [], "P", {}) == []
    assert [s[0] for s in seen] == ["lib_a", "lib_b"]
    with pytest.raises(ValueError, match="'lib_a' is already registered for family 'demo'"):
        register("demo", "lib_a")(offer_b)
