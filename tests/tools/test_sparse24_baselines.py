"""The 2:4 GEMM baselines (dense cuBLAS/cuBLASLt, cuSPARSELt direct, torch's cuSPARSELt): registration, the
instance they read from a problem, every library's absence reported as a reason, the ctypes tables, the operand
orders checked element by element on the host, and (GPU) every working configuration's C against float64.

The family's own package is written apart; these tests make its problem by hand and stand in for its
`decompress` with a plain format (kept values, and their position inside each group of four as metadata)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from sparseditto.tools.baselines import baseline_calls, candidates, cusparselt, libraries_for, sparse24_dense
from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.dtypes import to_float64, to_storage
from sparseditto.tools.families.base import Output, Problem

COMPRESSION = "sparseditto.tools.families.sparse24_gemm.compression"
OUT = {"fp16": "fp16", "bf16": "bf16", "fp8_e4m3": "fp16"}
TOLERANCE = {"fp16": 5e-3, "bf16": 2e-2, "fp8_e4m3": 5e-3}


def fake_decompress(values, meta, M, K):
    dense = np.zeros((M, K))
    columns = (np.arange(K // 2) // 2) * 4 + meta.astype(np.int64)
    dense[np.arange(M)[:, None], columns] = values
    return dense


@pytest.fixture
def fake_compression(monkeypatch):
    module = types.ModuleType(COMPRESSION)
    module.decompress = fake_decompress
    monkeypatch.setitem(sys.modules, COMPRESSION, module)


def make_problem(dtype="fp16", M=16, K=32, N=8, act=0, has_bias=False, alpha=1.0, seed=0):
    """A hand-made instance: A 2:4 along K (two random positions kept in every group of four), B, bias, C.
    Returns the problem, the float64 A and the float64 reference act(alpha A B + bias)."""
    rng = np.random.default_rng(seed)
    keep = np.sort(np.argsort(rng.random((M, K // 4, 4)), axis=2)[:, :, :2], axis=2).reshape(M, K // 2)
    values = to_storage(rng.standard_normal((M, K // 2)), dtype)
    b = to_storage(rng.standard_normal((K, N)), dtype)
    inputs = {"A_values": values, "A_meta": keep.astype(np.uint8), "B": b}
    input_dtypes = {"A_values": dtype, "A_meta": "int8", "B": dtype}
    a64 = fake_decompress(to_float64(values, dtype), keep, M, K)
    ref = alpha * (a64 @ to_float64(b, dtype))
    if has_bias:
        inputs["bias"] = to_storage(rng.standard_normal(M), OUT[dtype])
        input_dtypes["bias"] = OUT[dtype]
        ref += to_float64(inputs["bias"], OUT[dtype])[:, None]
    if act == 1:
        ref = np.maximum(ref, 0.0)
    elif act == 2:  # the family's GELU: the tanh form
        ref = 0.5 * ref * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (ref + 0.044715 * ref**3)))
    problem = Problem(dtype=dtype, symbols={"M": M, "K": K, "N": N, "act": act, "has_bias": int(has_bias)},
                      inputs=inputs, input_dtypes=input_dtypes, outputs={"C": Output((M, N), OUT[dtype], 1e-2)},
                      scalars={"alpha": alpha} if alpha != 1.0 else {})
    return problem, a64, ref


def gpu_present() -> bool:
    return sparse24_dense.cupy_status().startswith("available")


# -- registration and the instance --------------------------------------------------------------------------------

def test_the_family_has_dense_cublas_cusparselt_and_torchs_cusparselt():
    assert libraries_for("sparse24_gemm") == ("cublas", "cusparselt", "torch_cusparselt")
    assert "cusparselt" not in libraries_for("csr_spmm")


def test_the_instance_is_read_from_symbols_scalars_and_outputs():
    problem, _, _ = make_problem("fp8_e4m3", act=2, has_bias=True, alpha=0.5)
    gemm = sparse24_dense.sparse24_gemm(problem)
    assert (gemm.M, gemm.K, gemm.N, gemm.dtype, gemm.out_dtype) == (16, 32, 8, "fp8_e4m3", "fp16")
    assert (gemm.act, gemm.has_bias, gemm.alpha) == (2, True, 0.5)
    assert gemm.epilogue == ("alpha", "bias", "act")
    plain = sparse24_dense.sparse24_gemm(make_problem("bf16")[0])
    assert plain.epilogue == () and plain.out_dtype == "bf16"


@pytest.mark.parametrize(("change", "message"), [
    (lambda p: p.symbols.update(act=3), "act must be one of"),
    (lambda p: p.symbols.update(K=30), "not a multiple of 4"),
    (lambda p: p.symbols.update(has_bias=1), r"inputs missing: \['bias'\]"),
    (lambda p: setattr(p, "dtype", "fp32"), "no 2:4 GEMM baseline for dtype 'fp32'"),
    (lambda p: setattr(p, "outputs", {"y": p.outputs["C"]}), "expected \\['C'\\]"),
])
def test_an_instance_the_baselines_would_compute_wrongly_is_refused(change, message):
    problem, _, _ = make_problem()
    change(problem)
    with pytest.raises(ValueError, match=message):
        for library in libraries_for("sparse24_gemm"):
            candidates("sparse24_gemm", [library], problem, problem.inputs)


def test_dense_a_comes_from_the_familys_decompress_in_storage_type(fake_compression):
    for dtype in ("fp16", "bf16", "fp8_e4m3"):
        problem, a64, _ = make_problem(dtype, seed=3)
        gemm = sparse24_dense.sparse24_gemm(problem)
        dense = sparse24_dense.dense_a(gemm, problem, problem.inputs)
        assert dense.dtype == np.dtype(dtype_info(dtype).storage)
        assert np.array_equal(to_float64(dense, dtype), a64)
        assert np.all((a64.reshape(16, 8, 4) != 0).sum(axis=2) <= 2)


# -- availability -------------------------------------------------------------------------------------------------

@pytest.mark.skipif(gpu_present(), reason="checks the answers of a machine without a GPU")
def test_without_a_gpu_every_library_is_a_recorded_reason_and_no_configuration_is_offered():
    assert cusparselt.status().startswith("unavailable: ")
    torch, text = cusparselt.torch_cslt_status()
    assert torch is None and text.startswith("unavailable: ")
    for dtype in ("fp16", "bf16", "fp8_e4m3"):
        problem, _, _ = make_problem(dtype, act=1, has_bias=True)
        routes = sparse24_dense.route_status(sparse24_dense.sparse24_gemm(problem))
        assert routes and all(text.startswith("unavailable: ") for text in routes.values()), routes
        assert candidates("sparse24_gemm", (), problem, problem.inputs) == []
        assert baseline_calls("sparse24_gemm", (), problem, problem.inputs) == []


def test_a_library_file_that_does_not_load_is_a_reason_not_an_exception(monkeypatch):
    monkeypatch.setattr(cusparselt, "library_paths", lambda: ["/nonexistent/libcusparseLt.so.0"])
    cusparselt.load.cache_clear()
    cusparselt.status.cache_clear()
    try:
        text = cusparselt.status()
    finally:
        cusparselt.load.cache_clear()
        cusparselt.status.cache_clear()
    assert text.startswith("unavailable: no loadable libcusparseLt.so.0") and "/nonexistent" in text


# -- the ctypes tables --------------------------------------------------------------------------------------------

SOURCE = Path(cusparselt.__file__).read_text()

# Parameter counts of the prototypes in cusparseLt.h (0.8.1 and 0.10.0 agree).
HEADER_ARITY = {
    "cusparseLtGetProperty": 2, "cusparseLtInit": 1, "cusparseLtDestroy": 1, "cusparseLtDenseDescriptorInit": 8,
    "cusparseLtStructuredDescriptorInit": 9, "cusparseLtMatDescriptorDestroy": 1, "cusparseLtMatmulDescriptorInit": 9,
    "cusparseLtMatmulDescSetAttribute": 5, "cusparseLtMatmulAlgSelectionInit": 4,
    "cusparseLtMatmulAlgSelectionDestroy": 1, "cusparseLtMatmulAlgGetAttribute": 5, "cusparseLtMatmulPlanInit": 4,
    "cusparseLtMatmulPlanDestroy": 1, "cusparseLtMatmulGetWorkspace": 3, "cusparseLtSpMMAPruneCheck": 5,
    "cusparseLtSpMMACompressedSize": 4, "cusparseLtSpMMACompress": 6, "cusparseLtMatmulSearch": 11,
    "cusparseLtMatmul": 11, "cusparseLtGetErrorName": 1,
}


def test_every_entry_point_called_is_declared_with_the_headers_parameter_count():
    declared = {**cusparselt.SIGNATURES, **cusparselt.OPTIONAL_SIGNATURES}
    called = set(re.findall(r'(?:lt|library|self)\(\s*"(cusparseLt\w+)"', SOURCE))
    called |= set(re.findall(r'destroyer\("(cusparseLt\w+)"\)', SOURCE))
    assert called and called <= set(declared)
    assert {name: len(args) for name, args in declared.items()} == HEADER_ARITY


def test_every_header_constant_used_is_in_the_table_and_every_entry_is_used():
    table_end = SOURCE.index("\n}\n", SOURCE.index("HEADER_ENUMS = {"))
    code = SOURCE[:SOURCE.index("HEADER_ENUMS = {")] + SOURCE[table_end:]
    used = set(re.findall(r'"((?:CUDA|CUSPARSE|CUSPARSELT)_[A-Z0-9_]+|MAJOR_VERSION|MINOR_VERSION|PATCH_LEVEL)"', code))
    assert used == set(cusparselt.HEADER_ENUMS)
    # sequential enums of cusparseLt.h, counted from their first member
    enums = cusparselt.HEADER_ENUMS
    assert enums["CUSPARSELT_MATMUL_BIAS_POINTER"] - enums["CUSPARSELT_MATMUL_ACTIVATION_RELU"] == 8
    assert enums["CUSPARSELT_MATMUL_SPLIT_K_MODE"] - enums["CUSPARSELT_MATMUL_ALG_CONFIG_ID"] == 4
    assert enums["CUSPARSE_COMPUTE_32F"] == 2 and enums["CUDA_R_8F_E4M3"] == 28


def test_declared_prototypes_and_failed_statuses_on_a_stand_in_library():
    class Function:
        def __init__(self, status):
            self.status = status

        def __call__(self, *args):
            return self.status

    library = types.SimpleNamespace(_name="stand-in", **{name: Function(0) for name in cusparselt.SIGNATURES})
    library.cusparseLtMatmul = Function(7)
    cusparselt._declare(library)
    assert library.cusparseLtMatmul.argtypes[-1] is cusparselt.ctypes.c_int32
    assert library.cusparseLtInit.restype is cusparselt.ctypes.c_int
    lt = cusparselt.CusparseLt(library, "stand-in")
    lt("cusparseLtInit", 0)
    with pytest.raises(cusparselt.CusparseLtError, match="cusparseLtMatmul returned cusparseStatus_t 7"):
        lt("cusparseLtMatmul", *([0] * 11))
    del library.cusparseLtMatmulSearch
    with pytest.raises(cusparselt.LibraryUnavailable, match="has no cusparseLtMatmulSearch"):
        cusparselt._declare(library)


def test_opaque_structs_are_aligned_and_large_enough_for_every_release():
    structs = [cusparselt.Opaque() for _ in range(8)]
    assert all(s.ptr % 16 == 0 for s in structs) and cusparselt.OPAQUE_BYTES >= 1024


# -- operand orders -----------------------------------------------------------------------------------------------

def _offset(desc, r, c):
    """Where element (r, c) of the matrix a descriptor describes lies in memory, in elements."""
    return r * desc.ld + c if desc.order == "row" else r + c * desc.ld


def _op_offset(desc, op, r, c):
    """Where element (r, c) of op(X) lies in X's memory."""
    return _offset(desc, r, c) if op == "N" else _offset(desc, c, r)


@pytest.mark.parametrize(("M", "K", "N"), [(3, 8, 5), (16, 4, 2)])
def test_every_description_maps_each_element_to_its_place_in_a_b_and_c(M, K, N):
    configurations = cusparselt.layouts(M, K, N)
    assert [c[0].name for c in configurations] == ["cusparselt_ab_brow", "cusparselt_ab_bcol",
                                                   "cusparselt_btat_brow", "cusparselt_btat_bcol"]
    for described in configurations:
        assert sorted(layout.ops for layout in described) == [("N", "N"), ("N", "T"), ("T", "N"), ("T", "T")]
        for layout in described:
            op_a, op_b = layout.ops
            for desc in (layout.mat_a, layout.mat_b, layout.mat_d):
                assert desc.ld >= (desc.cols if desc.order == "row" else desc.rows)
            b_at = (lambda k, j: j * K + k) if layout.b_transposed else (lambda k, j: k * N + j)
            for i in range(M):
                for k in range(K):
                    for j in range(N):
                        if layout.sparse_first:  # D = A B: A(i,k), B(k,j), D(i,j) = C(i,j)
                            assert _op_offset(layout.mat_a, op_a, i, k) == i * K + k
                            assert _op_offset(layout.mat_b, op_b, k, j) == b_at(k, j)
                            assert _offset(layout.mat_d, i, j) == i * N + j
                        else:  # D = B^T A^T: B^T(j,k), A^T(k,i), D(j,i) = C(i,j)
                            assert _op_offset(layout.mat_a, op_a, j, k) == b_at(k, j)
                            assert _op_offset(layout.mat_b, op_b, k, i) == i * K + k
                            assert _offset(layout.mat_d, j, i) == i * N + j
            assert layout.fuses_bias == layout.sparse_first


# -- configurations offered ---------------------------------------------------------------------------------------

@pytest.fixture
def libraries_present(monkeypatch):
    """Candidates are only named, never built, so stand-ins answer for torch, CuPy and cuSPARSELt."""
    fake_torch = types.SimpleNamespace(__version__="0", _scaled_mm=None, float8_e4m3fn=None,
                                       cuda=types.SimpleNamespace(get_device_capability=lambda: (9, 0)))
    monkeypatch.setattr(sparse24_dense, "torch_module", lambda: fake_torch)
    monkeypatch.setattr(sparse24_dense, "cupy_status", lambda: "available: cupy")
    monkeypatch.setattr(cusparselt, "status", lambda: "available: cuSPARSELt 0.8.1")
    monkeypatch.setattr(cusparselt, "torch_cslt_status", lambda: (fake_torch, "available: torch"))


@pytest.mark.parametrize(("dtype", "epilogue", "expected"), [
    ("fp16", {"act": 1, "has_bias": True}, ["cublas_dense_cupy_matmul", "cublas_dense_torch_mm",
                                            "cublaslt_dense_torch_epilogue_ct_out",
                                            "cublaslt_dense_torch_epilogue_ct_copy"]),
    ("fp16", {}, ["cublas_dense_cupy_matmul", "cublas_dense_torch_mm"]),
    ("bf16", {"alpha": 2.0}, ["cublas_dense_torch_mm", "cublaslt_dense_torch_epilogue_ct_out",
                              "cublaslt_dense_torch_epilogue_ct_copy"]),
    ("fp8_e4m3", {"act": 2}, ["cublaslt_fp8_scaled_mm_ab", "cublaslt_fp8_scaled_mm_btat"]),
])
def test_each_value_type_offers_its_dense_routes_and_every_cusparselt_order(libraries_present, dtype, epilogue,
                                                                           expected):
    problem, _, _ = make_problem(dtype, **epilogue)
    offered = {library: candidates("sparse24_gemm", [library], problem, problem.inputs)
               for library in libraries_for("sparse24_gemm")}
    assert [c.name for c in offered["cublas"]] == expected
    assert [c.name for c in offered["cusparselt"]] == [c[0].name for c in cusparselt.layouts(16, 32, 8)]
    assert [len(c.variants) for c in offered["cusparselt"]] == [4] * 4
    assert [(c.name, len(c.variants)) for c in offered["torch_cusparselt"]] == [("torch_cslt_brow", 2),
                                                                               ("torch_cslt_bcol", 2)]


def test_without_torch_fp16_keeps_cupy_and_bf16_and_fp8_say_why(monkeypatch):
    monkeypatch.setattr(sparse24_dense, "torch_module", lambda: None)
    monkeypatch.setattr(sparse24_dense, "cupy_status", lambda: "available: cupy")
    status = {dtype: sparse24_dense.route_status(sparse24_dense.sparse24_gemm(make_problem(dtype)[0]))
              for dtype in ("fp16", "bf16", "fp8_e4m3")}
    assert status["fp16"]["cupy_matmul"] == "available: cupy"
    assert status["bf16"]["cupy_matmul"] == "unavailable: CuPy has no bf16 matrix product"
    assert status["fp8_e4m3"]["torch_scaled_mm"].startswith("unavailable: torch")
    offered = candidates("sparse24_gemm", ["cublas"], make_problem()[0], {})
    assert [c.name for c in offered] == ["cublas_dense_cupy_matmul"]


def test_the_configuration_text_says_where_each_epilogue_step_runs():
    gemm = sparse24_dense.sparse24_gemm(make_problem(act=2, has_bias=True, alpha=0.5)[0])
    text = sparse24_dense.epilogue_text(gemm, ("alpha",), "cuSPARSELt")
    assert text == ("epilogue fused in cuSPARSELt: alpha=0.5; epilogue in one CuPy elementwise pass after the product, "
                    "timed with it: bias per row, gelu (tanh form)")
    assert sparse24_dense.epilogue_text(sparse24_dense.sparse24_gemm(make_problem()[0]), (), "x") == "no epilogue"


# -- on the GPU ---------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8_e4m3"])
@pytest.mark.parametrize("epilogue", [{}, {"act": 1, "has_bias": True, "alpha": 0.5}, {"act": 2, "has_bias": True}])
def test_every_working_configuration_computes_the_product(fake_compression, dtype, epilogue):
    import cupy

    problem, _, reference = make_problem(dtype, M=256, K=512, N=128, seed=5, **epilogue)
    device = {name: cupy.asarray(array) for name, array in problem.inputs.items()}
    calls = baseline_calls("sparse24_gemm", (), problem, device)
    cupy.cuda.get_current_stream().synchronize()
    expected = {"cublas"} if dtype == "fp16" or sparse24_dense.torch_status()[0] is not None else set()
    expected |= {"cusparselt"} if cusparselt.status().startswith("available") else set()
    expected |= {"torch_cusparselt"} if cusparselt.torch_cslt_status()[0] is not None else set()
    assert {call.library for call in calls} == expected, [call.name for call in calls]
    wrong = []
    for call in calls:
        call.output.fill(0)
        call.run()
        cupy.cuda.get_current_stream().synchronize()
        result = to_float64(call.output.get(), OUT[dtype])
        error = np.linalg.norm(result - reference) / np.linalg.norm(reference)
        if result.shape != reference.shape or not error <= TOLERANCE[dtype]:
            wrong.append((call.name, call.config, error))
    assert not wrong, wrong
    for name, array in problem.inputs.items():
        assert np.array_equal(device[name].get(), array), f"a baseline changed input {name}"
