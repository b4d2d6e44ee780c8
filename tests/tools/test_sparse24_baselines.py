"""The 2:4 GEMM baselines (dense cuBLAS/cuBLASLt, cuSPARSELt direct, torch's cuSPARSELt): registration, the
instance they read from a problem, every library's absence reported as a reason, where the loader looks, the ctypes
tables, the operand orders checked element by element on the host (and the 2:4 rule read through each), what the
direct and torch routes do once and per call and on which stream (on stand-ins for the library, CuPy and torch),
and (GPU) every working configuration's C against float64.

These tests make their problems by hand, smaller than the family's shapes allow (K = 32), and stand in for its
`decompress` with a plain format (kept values, and their position inside each group of four as metadata)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.tools.baselines import (
    baseline_calls, byte_transpose, candidates, cusparselt, libraries_for, sparse24_dense,
)
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
    importlib.import_module("sparseditto.tools.families.sparse24_gemm")  # the real family first: the fp8 baselines
    # compile its kernel library's transposition (byte_transpose), and the library imports every family
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


@pytest.fixture
def fresh_status():
    cusparselt.load.cache_clear()
    cusparselt.status.cache_clear()
    yield
    cusparselt.load.cache_clear()
    cusparselt.status.cache_clear()


def test_a_library_file_that_does_not_load_is_a_reason_not_an_exception(monkeypatch, fresh_status):
    monkeypatch.setattr(cusparselt, "library_paths",
                        lambda: ["/nonexistent/libcusparseLt.so.0", "/old/libcusparseLt.so"])
    monkeypatch.setattr(cusparselt, "_mapped_copies", lambda: [])
    text = cusparselt.status()
    assert text.startswith("unavailable: no loadable libcusparseLt.so.0")
    # every file tried is named with its error, and the reason says where else it looked
    assert "/nonexistent" in text and "/old/libcusparseLt.so" in text
    assert "none: torch has not loaded one" in text and "nvidia/cusparselt/lib" in text and "torch/lib" in text


def test_the_loader_prefers_the_mapped_copy_then_scans_every_import_path(monkeypatch, tmp_path):
    """On the GPU machine the only copy is torch's (nvidia-cusparselt-cu12, or torch/lib): each sys.path entry is
    scanned, so a site folder whose `nvidia/__init__.py` hides the namespace's other folders cannot hide it."""
    carried, system, bundled = tmp_path / "carried", tmp_path / "system", tmp_path / "bundled"
    (carried / "nvidia").mkdir(parents=True)
    (carried / "nvidia" / "__init__.py").write_text("")
    for root, folder in ((system, "nvidia/cusparselt/lib"), (bundled, "torch/lib")):
        (root / folder).mkdir(parents=True)
        (root / folder / "libcusparseLt.so.0").write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(carried), str(system), str(bundled)])
    monkeypatch.setattr(cusparselt, "_mapped_copies", lambda: ["/torch/mapped/libcusparseLt.so.0"])
    paths = cusparselt.library_paths()
    assert paths[:3] == ["/torch/mapped/libcusparseLt.so.0", str(system / "nvidia/cusparselt/lib/libcusparseLt.so.0"),
                         str(bundled / "torch/lib/libcusparseLt.so.0")]
    assert paths[-1] == "libcusparseLt.so.0"


def test_the_mapped_copies_are_read_from_the_process_maps(monkeypatch, tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 12 /site/nvidia/cusparselt/lib/libcusparseLt.so.0\n"
                    "7f01-7f02 r--p 00000000 08:01 12 /site/nvidia/cusparselt/lib/libcusparseLt.so.0\n"
                    "7f02-7f03 rw-p 00000000 00:00 0 \n"
                    "7f03-7f04 r-xp 00000000 08:01 13 /site/torch/lib/libtorch_cuda.so\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda name, *a, **k: real_open(maps if name == "/proc/self/maps" else name,
                                                                         *a, **k))
    assert cusparselt._mapped_copies() == ["/site/nvidia/cusparselt/lib/libcusparseLt.so.0"]


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


def _two_of_four(rows, cols, seed, dtype="fp16"):
    """A rows x cols matrix in storage type whose every group of four consecutive elements in a row holds two
    nonzero values and two zeros, one of them -0.0 (a zero for the 2:4 rule, though its bits are not 0)."""
    rng = np.random.default_rng(seed)
    order = np.argsort(rng.random((rows, cols // 4, 4)), axis=2)
    values = np.zeros((rows, cols // 4, 4))
    np.put_along_axis(values, order[..., :2], rng.uniform(0.5, 2.0, (rows, cols // 4, 2)), axis=2)
    np.put_along_axis(values, order[..., 2:3], -0.0, axis=2)
    return to_storage(values.reshape(rows, cols), dtype)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8_e4m3"])
@pytest.mark.parametrize(("M", "K", "N"), [(8, 16, 4), (12, 8, 20)])
def test_every_description_reads_a_back_and_checks_2_4_along_k(dtype, M, K, N):
    along_k = _two_of_four(M, K, seed=M + K, dtype=dtype)
    along_m_only = np.ascontiguousarray(_two_of_four(K, M, seed=7, dtype=dtype).T)  # groups of four down columns
    assert not cusparselt.breaks_2_4_along_k(along_m_only.T.copy(), cusparselt.layouts(K, M, N)[0][0])
    for described in cusparselt.layouts(M, K, N):
        for layout in described:
            assert np.array_equal(cusparselt.read_a(along_k, layout), along_k), (layout.name, layout.ops)
            assert not cusparselt.breaks_2_4_along_k(along_k, layout), (layout.name, layout.ops)
            assert cusparselt.breaks_2_4_along_k(along_m_only, layout), (layout.name, layout.ops)


def test_a_description_that_reads_along_m_or_past_a_is_caught():
    """The check reads through the descriptor: had the transposed order described A^T with its groups along M,
    a matrix 2:4 along K would fail it, and one reaching past A's memory is refused outright."""
    M, K, N = 8, 16, 4
    a = _two_of_four(M, K, seed=1)
    good = cusparselt.layouts(M, K, N)[2][0]  # D^T = B^T A^T, A^T as matB
    assert not good.sparse_first and not cusparselt.breaks_2_4_along_k(a, good)
    wrong = dataclasses.replace(good, mat_b=cusparselt.MatrixDesc(K, M, M, "row"))  # K x M read row-major
    assert cusparselt.breaks_2_4_along_k(a, wrong)
    past = dataclasses.replace(good, mat_b=cusparselt.MatrixDesc(K, M, K + 4, "col"))
    with pytest.raises(ValueError, match="reaches past A's 128 elements"):
        cusparselt.read_a(a, past)


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
    assert [(c.name, len(c.variants)) for c in offered["torch_cusparselt"]] == [("torch_cslt_brow", 4),
                                                                               ("torch_cslt_bcol", 4)]
    # graph replay first, eager only where capture fails; split-K arguments first within each
    assert [v.args[3:] for v in offered["torch_cusparselt"][0].variants] == [(True, True), (False, True),
                                                                             (True, False), (False, False)]


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
@pytest.mark.parametrize("epilogue", [{}, {"act": 1, "has_bias": True, "alpha": 0.5}, {"act": 2, "has_bias": True},
                                      {"act": 1, "has_bias": True}, {"act": 2, "has_bias": True, "alpha": 0.5},
                                      {"has_bias": True}])
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


# -- torch's cuSPARSELt route: which stream each op runs on, what runs per call ------------------------------------

class _Stream:
    def __init__(self, name):
        self.name = name


class _Tensor:
    def __init__(self, torch, name):
        self.torch, self.name, self.device, self.dtype = torch, name, "cuda:0", "float16"

    def t(self):
        return _Tensor(self.torch, f"{self.name}^T")

    def copy_(self, source):
        self.torch.issue("copy_", f"{source.name} -> {self.name}")


class _Graph:
    def __init__(self, torch):
        self.torch = torch

    def replay(self):
        self.torch.issue("replay", "")


class _FakeTorch:
    """Just enough of torch for torch_run and _build_torch: every op records (op, detail, the stream it was issued
    on); ops issued while a graph is captured are recorded on the capture stream and never run again."""

    float16, bfloat16, float32 = "float16", "bfloat16", "float32"

    def __init__(self, mm_search=(7, 2, 1, 30)):
        self.ops = []
        self.current = self.default = _Stream("torch default")
        torch = self

        @contextlib.contextmanager
        def stream(chosen):
            previous, torch.current = torch.current, chosen
            try:
                yield
            finally:
                torch.current = previous

        @contextlib.contextmanager
        def graph(_, capture_error_mode):
            with stream(_Stream(f"capture ({capture_error_mode})")):
                yield

        self.cuda = types.SimpleNamespace(
            stream=stream, graph=graph, CUDAGraph=lambda: _Graph(torch), default_stream=lambda device: torch.default,
            ExternalStream=lambda pointer, device: _Stream(f"external {pointer:#x}"))
        self.device = lambda kind, index: f"{kind}:{index}"
        self._C = types.SimpleNamespace(_cusparselt=types.SimpleNamespace(mm_search=self._mm_search))
        self._search_result = mm_search

    def issue(self, op, detail):
        self.ops.append((op, detail, self.current.name))

    def from_dlpack(self, array):
        return _Tensor(self, array)

    def empty(self, shape, dtype, device):
        return _Tensor(self, "scratch B^T")

    def tensor(self, values, dtype):
        return _Tensor(self, "alpha")

    def _cslt_compress(self, a):
        self.issue("_cslt_compress", a.name)
        return _Tensor(self, "compressed A")

    def _mm_search(self, compressed, dense, bias, alpha, out_dtype, transpose):
        self.issue("mm_search", dense.name)
        return self._search_result

    def _cslt_sparse_mm(self, compressed, dense, **kwargs):
        self.issue("_cslt_sparse_mm", ", ".join(f"{k}={v}" for k, v in kwargs.items() if v is not None))
        return _Tensor(self, "result")


@pytest.fixture
def cupy_stream(monkeypatch):
    """A stand-in CuPy whose current stream is a non-default one (its pointer is what the harness records on)."""
    from sparseditto.tools.baselines import common

    monkeypatch.setattr(common, "_TORCH_STREAMS", {})
    current = types.SimpleNamespace(ptr=0x5000)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=0),
                                                          get_current_stream=lambda: current))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return current


def _torch_call(torch, b_transposed, graphed, with_split=True):
    gemm = sparse24_dense.Sparse24Gemm(16, 32, 8, "fp16", "fp16", 0, False, 1.0)
    ops = types.SimpleNamespace(gemm=gemm, a="A", b="B", bias=None, new_output=lambda: "C")
    return cusparselt._build_torch(torch, lambda: ops, b_transposed, with_split, graphed)


@pytest.mark.parametrize("b_transposed", [False, True])
def test_torch_prepares_once_on_the_harness_stream_and_each_call_only_replays_the_graph(cupy_stream, b_transposed):
    torch = _FakeTorch()
    call = _torch_call(torch, b_transposed, graphed=True)
    harness = "external 0x5000"
    transpose = [("copy_", "B^T -> scratch B^T", harness)] if b_transposed else []
    product = [("_cslt_sparse_mm", "alg_id=7, split_k=2, split_k_mode=1", harness), ("copy_", "result -> C", harness)]
    captured = [(op, detail, "capture (relaxed)") for op, detail, _ in transpose + product]
    assert torch.ops == ([("_cslt_compress", "A", harness)] + transpose
                         + [("mm_search", "scratch B^T^T" if b_transposed else "B", harness)]
                         + transpose + product + captured)
    assert "replayed from a CUDA graph" in call.config and "alg id 7, split_k 2, split_k_mode 1" in call.config
    torch.ops.clear()
    for _ in range(3):
        call.run()
    assert torch.ops == [("replay", "", harness)] * 3  # no compression, search, plan or capture per call
    cupy_stream.ptr = 0  # CuPy's legacy default stream is torch's default stream
    call.run()
    assert torch.ops[-1] == ("replay", "", "torch default")


def test_eager_torch_makes_only_the_product_calls_on_the_harness_stream(cupy_stream):
    torch = _FakeTorch(mm_search=(3, 1, False, 30))  # older torch: the third value is a one-kernel flag
    call = _torch_call(torch, b_transposed=True, graphed=False)
    assert "eager" in call.config and "split_k_one_kernel False" in call.config
    torch.ops.clear()
    call.run()
    call.run()
    harness = "external 0x5000"
    assert torch.ops == [("copy_", "B^T -> scratch B^T", harness),
                         ("_cslt_sparse_mm", "alg_id=3, split_k=1, split_k_one_kernel=False", harness),
                         ("copy_", "result -> C", harness)] * 2
    without_split = _torch_call(_FakeTorch(), b_transposed=False, graphed=False, with_split=False)
    assert "split-K not set" in without_split.config


# -- the direct route's orchestration, on a stand-in library ---------------------------------------------------------

class _DeviceArray:
    """A CuPy stand-in array: NumPy values and a fake device address."""

    def __init__(self, registry, values):
        self.values = np.asarray(values)
        self.data = types.SimpleNamespace(ptr=0x1000 * (len(registry) + 1))
        self.dtype, self.size = self.values.dtype, self.values.size
        registry[self.data.ptr] = self

    def reshape(self, *shape):
        return self.values.reshape(*shape)

    def get(self):
        return self.values


class _StandInLt:
    """Records every cuSPARSELt call; writes what the real library writes through pointers it is handed."""

    def __init__(self, registry, check_writes):
        self.calls, self.registry, self.check_writes = [], registry, check_writes
        self.cdll, self.path = types.SimpleNamespace(), "stand-in"

    def __call__(self, name, *args):
        self.calls.append((name, args))
        if name == "cusparseLtSpMMAPruneCheck" and self.check_writes is not None:
            self.registry[args[3]].values[0] = self.check_writes
        for arg in args:  # sizes and attributes read back through byref
            if type(arg).__name__ == "CArgObject":
                arg._obj.value = 64

    def destroyer(self, name):
        return functools.partial(self, name)

    def version(self):
        return "0.8.1"


@pytest.fixture
def stand_in_direct(monkeypatch):
    registry, copies = {}, []
    current = types.SimpleNamespace(ptr=0x5000)
    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(get_current_stream=lambda: current), uint8=np.uint8, int32=np.int32,
        empty=lambda shape, dtype: _DeviceArray(registry, np.empty(shape, dtype)),
        zeros=lambda shape, dtype: _DeviceArray(registry, np.zeros(shape, dtype)),
        copyto=lambda dst, src: copies.append((dst, src)))
    monkeypatch.setitem(sys.modules, "cupy", fake)

    def build(layout, check_writes=None, a=None):
        lt = _StandInLt(registry, check_writes)
        monkeypatch.setattr(cusparselt, "load", lambda: lt)
        gemm = sparse24_dense.Sparse24Gemm(8, 16, 4, "fp16", "fp16", 0, False, 1.0)
        a = _two_of_four(8, 16, seed=3) if a is None else a
        b = types.SimpleNamespace(dtype=np.float16, T="B^T", data=types.SimpleNamespace(ptr=0xB000))
        ops = types.SimpleNamespace(gemm=gemm, a=_DeviceArray(registry, a), b=b, bias=None,
                                    new_output=lambda: _DeviceArray(registry, np.zeros((8, 4), np.float16)))
        return lt, cusparselt._build(layout, lambda: ops)

    return build, current, copies


@pytest.mark.parametrize("order", range(4))
def test_a_valid_a_passes_the_librarys_check_when_the_check_writes_nothing(stand_in_direct, order):
    """The 2:4 flag starts at 0: a check that only reports violations accepts a valid A in every order."""
    build, current, copies = stand_in_direct
    layout = cusparselt.layouts(8, 16, 4)[order][0]
    lt, call = build(layout)
    assert [name for name, _ in lt.calls].count("cusparseLtSpMMAPruneCheck") == 1
    lt.calls.clear()
    copies.clear()
    current.ptr = 0x6000
    call.run()
    assert [name for name, _ in lt.calls] == ["cusparseLtMatmul"]  # nothing else per call
    assert lt.calls[0][1][9][0] == 0x6000  # on the stream current at the call
    assert len(copies) == int(layout.b_transposed)


def test_the_librarys_rejection_and_a_matrix_2_4_along_m_each_say_so(stand_in_direct):
    build, _, _ = stand_in_direct
    layout = cusparselt.layouts(8, 16, 4)[3][0]  # D^T = B^T A^T, A^T as matB, op N
    with pytest.raises(ValueError, match="PruneCheck rejects A described as matB 16x8 col-major ld 16, op N"):
        build(layout, check_writes=1)
    along_m = np.ascontiguousarray(_two_of_four(16, 8, seed=4).T)
    with pytest.raises(ValueError, match="A is not 2:4 along K as matB 16x8 col-major ld 16, op N reads it"):
        build(layout, a=along_m)


def test_the_fp8_baselines_transpose_b_with_the_sequences_kernel_as_its_header_launches_it(monkeypatch):
    """byte_transpose launches sp24w_transpose_b with the grid, block and argument order of the e4m3 sequence's own
    launch entry (ceil(N / 128) x ceil(K / 128) blocks of 256), says so for the configuration text, and falls back to
    CuPy's copy where an array is off 16-byte alignment or the kernel does not compile."""
    launched, copies = [], []
    fake = types.SimpleNamespace(int32=np.int32, cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=0)),
                                 copyto=lambda dst, src: copies.append((dst, src)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    entry = next(k for k in get_kernel("sp24_wgmma_sp_fp8").kernels if k.entry == "sp24w_transpose_b")
    aligned = types.SimpleNamespace(ptr=4096)
    src = types.SimpleNamespace(shape=(1088, 400), dtype=np.dtype(np.uint8), data=aligned,
                                T=types.SimpleNamespace(shape=(400, 1088)))
    dst = types.SimpleNamespace(shape=(400, 1088), data=aligned)
    monkeypatch.setattr(byte_transpose, "_transposition",
                        lambda device: (lambda grid, block, args: launched.append((grid, block, args)), entry))
    call, how = byte_transpose.byte_transposer(src, dst)
    call()
    assert how == "sp24_wgmma_sp_fp8's sp24w_transpose_b"
    (grid, block, args), = launched
    assert grid == (4, 9, 1) and block == (256, 1, 1)
    assert args[0] is src and args[1] is dst and args[2:] == (400, 1088)
    src.data = types.SimpleNamespace(ptr=4097)  # a view off the 16-byte alignment the kernel's vector path needs
    call, how = byte_transpose.byte_transposer(src, dst)
    call()
    assert how == "CuPy copyto"
    monkeypatch.setattr(byte_transpose, "_transposition", lambda device: None)
    byte_transpose.byte_transposer(src, dst)[0]()
    assert len(launched) == 1 and len(copies) == 2
    assert all(d is dst and t is src.T for d, t in copies)
