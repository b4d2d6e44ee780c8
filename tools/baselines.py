"""Vendor-library baselines for CSR SpMV and SpMM, each offered in every reasonable configuration.

A speedup is only honest against the vendor library at its best, so instead of one default call
this module prepares every sensible (algorithm, layout, preprocessing, front end) combination and
lets the harness time them all and keep the fastest per library. Library defaults are known to be
weak: CuPy's ``csr_matrix @ dense`` is 3-12x slower than PyTorch's CSR matmul (an H200 figure given in
issue 2, not re-measured here), and cupyx refuses fp16 SpMM, so the cuSPARSE generic API is driven directly.

Candidates that a library rejects (unsupported dtype/algorithm/layout) are skipped with a debug
log. Every GPU library is imported inside functions so the module imports on a CPU-only machine.
"""

import contextlib
import ctypes
import functools
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import structlog

# CuPy arrays in annotations. At run time this is Any, so annotations never import CuPy.
if TYPE_CHECKING:
    from cupy import ndarray as _Array
else:
    _Array = Any

log = structlog.get_logger(__name__)

# cudaDataType_t values (library_types.h); stable across CUDA releases.
_CUDA_R_32F = 0
_CUDA_VALUE_TYPE = {"fp32": 0, "fp16": 2, "bf16": 14}
# bf16 travels as raw uint16 bits because CuPy has no bfloat16 dtype.
_STORAGE_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "uint16"}

# cusparseSpMVAlg_t / cusparseSpMMAlg_t values from cusparse.h. CuPy's bindings only export the
# legacy aliases (CUSPARSE_CSRMV_ALG1, CUSPARSE_CSRMM_ALG1, ...) and lack SpMM CSR_ALG2/ALG3.
_SPMV_ALGS = {
    "default": (0, "CUSPARSE_SPMV_ALG_DEFAULT"),
    "csr_alg1": (2, "CUSPARSE_SPMV_CSR_ALG1"),
    "csr_alg2": (3, "CUSPARSE_SPMV_CSR_ALG2"),
}
_SPMM_ALGS = {
    "default": (0, "CUSPARSE_SPMM_ALG_DEFAULT"),
    "csr_alg1": (4, "CUSPARSE_SPMM_CSR_ALG1"),
    "csr_alg2": (6, "CUSPARSE_SPMM_CSR_ALG2"),
    "csr_alg3": (12, "CUSPARSE_SPMM_CSR_ALG3"),
}
# cuSPARSE documents cusparseSpMM_preprocess as effective only for these algorithms.
_SPMM_PREPROCESS_ALGS = frozenset({"csr_alg1", "csr_alg3"})

_DENSE_LIMIT_BYTES = 4 << 30

_TORCH_STREAMS: dict[tuple[int, int], Any] = {}


@dataclass
class BaselineCall:
    """One prepared vendor-library call; `run` only enqueues work on the current CuPy stream."""

    name: str
    library: str
    config: str
    run: Callable[[], None]
    output: _Array
    prepare_note: str = ""


# A candidate: its stable name and the ways to build it, tried in order until one works.
_Candidate = tuple[str, Sequence[Callable[[], BaselineCall]]]


class _Owner:
    """Keeps alive what raw pointers in cuSPARSE descriptors refer to, and destroys the descriptors.

    Descriptors hold bare device/host addresses, so the arrays behind them must live exactly as
    long as the call. Destruction is skipped at interpreter exit, when the CUDA context may
    already be gone.
    """

    def __init__(self) -> None:
        self._objects: list[Any] = []
        self._descriptors: list[tuple[Callable[[int], None], int]] = []
        finalizer = weakref.finalize(self, _destroy_descriptors, self._descriptors)
        finalizer.atexit = False

    def keep(self, *objects: Any) -> None:
        self._objects.extend(objects)

    def descriptor(self, destroy: Callable[[int], None], handle: int) -> int:
        self._descriptors.append((destroy, handle))
        return handle


def _destroy_descriptors(descriptors: list[tuple[Callable[[int], None], int]]) -> None:
    """Best-effort release at garbage collection; a failure here has no one left to report to."""
    for destroy, handle in reversed(descriptors):
        with contextlib.suppress(Exception):
            destroy(handle)


@dataclass
class _OwnedLaunch:
    """The `run` callable: launches while holding the owner, so buffers outlive every launch."""

    owner: _Owner
    launch: Callable[[], None]

    def __call__(self) -> None:
        self.launch()


# ---------------------------------------------------------------------------------------------
# Public entry points


def spmv_baselines(
    rowptr: _Array,
    colind: _Array,
    values: _Array,
    x: _Array,
    M: int,
    K: int,
    dtype_name: str,
) -> list[BaselineCall]:
    """All working SpMV baselines (y = A x) for this matrix, each trial-run once."""
    _check_operands(dtype_name, values, x, (K,))
    candidates: list[_Candidate] = []

    for alg_key in _SPMV_ALGS:
        for preprocess in (False, True):
            name = f"cusparse_spmv_{alg_key}" + ("_pre" if preprocess else "")
            candidates.append(
                _single(name, _cusparse_spmv, rowptr, colind, values, x, M, K, dtype_name,
                        alg_key, preprocess)
            )

    torch = _torch_module()
    if torch is not None:
        for index_bits in (32, 64):
            for form in ("mv", "mm"):
                name = f"torch_csr_spmv_{form}_i{index_bits}"
                variants = [
                    functools.partial(
                        _torch_csr_spmv, name, torch, rowptr, colind, values, x, M, K, dtype_name,
                        index_bits, form, use_out,
                    )
                    for use_out in (True, False)
                ]
                candidates.append((name, variants))

    densified = functools.cache(lambda: _densify_within_limit(rowptr, colind, values, M, K))
    if dtype_name != "bf16":
        candidates.append(
            _single("cublas_dense_gemv_cupy_matmul", _cupy_dense_spmv, densified, x, M, "matmul")
        )
    if dtype_name == "fp32":
        candidates.append(_single("cublas_dense_sgemv_cupy", _cupy_dense_spmv, densified, x, M, "gemv"))
    if torch is not None:
        candidates.append(
            _single("cublas_dense_gemv_torch", _torch_dense_spmv, torch, densified, x, M, dtype_name)
        )
    return _collect(candidates)


def spmm_baselines(
    rowptr: _Array,
    colind: _Array,
    values: _Array,
    B: _Array,
    M: int,
    K: int,
    N: int,
    dtype_name: str,
) -> list[BaselineCall]:
    """All working SpMM baselines (C = A B, B and C row-major) for this matrix, each trial-run once."""
    _check_operands(dtype_name, values, B, (K, N))
    candidates: list[_Candidate] = []

    for alg_key in _SPMM_ALGS:
        for layout in ("row", "col"):
            for preprocess in (False, True) if alg_key in _SPMM_PREPROCESS_ALGS else (False,):
                name = f"cusparse_spmm_{alg_key}_{layout}" + ("_pre" if preprocess else "")
                candidates.append(
                    _single(name, _cusparse_spmm, rowptr, colind, values, B, M, K, N, dtype_name,
                            alg_key, layout, preprocess)
                )

    torch = _torch_module()
    if torch is not None:
        for index_bits in (32, 64):
            name = f"torch_csr_spmm_i{index_bits}"
            variants = [
                functools.partial(
                    _torch_csr_spmm, name, torch, rowptr, colind, values, B, M, K, N, dtype_name,
                    index_bits, use_out,
                )
                for use_out in (True, False)
            ]
            candidates.append((name, variants))

    densified = functools.cache(lambda: _densify_within_limit(rowptr, colind, values, M, K))
    if dtype_name != "bf16":
        candidates.append(_single("cublas_dense_gemm_cupy", _cupy_dense_spmm, densified, B, M, N))
    if torch is not None:
        candidates.append(
            _single("cublas_dense_gemm_torch", _torch_dense_spmm, torch, densified, B, M, N, dtype_name)
        )
    return _collect(candidates)


def available_libraries() -> dict[str, str]:
    """Versions of the libraries behind the baselines, or why each one is unavailable."""
    versions: dict[str, str] = {}
    try:
        import cupy

        versions["cupy"] = cupy.__version__
    except Exception as exc:  # any import failure means "not available"
        versions["cupy"] = f"not importable: {exc}"
    try:
        import cupy
        from cupy_backends.cuda.libs import cusparse

        versions["cusparse"] = str(cusparse.getVersion(cupy.cuda.device.get_cusparse_handle()))
    except Exception as exc:  # missing library or no GPU
        versions["cusparse"] = f"not available: {str(exc).splitlines()[0]}"
    try:
        import torch

        cuda_note = "" if torch.cuda.is_available() else " (no CUDA device)"
        versions["torch"] = f"{torch.__version__}{cuda_note}"
    except Exception as exc:  # torch is optional
        versions["torch"] = f"not importable: {exc}"
    return versions


def densify(
    rowptr: _Array, colind: _Array, values: _Array, M: int, K: int
) -> _Array:
    """Dense (M, K) C-contiguous copy of a CSR matrix, in the dtype of `values` (uint16 = bf16 bits).

    Accumulates in fp32 so duplicate entries are summed (as CSR semantics require) for every
    dtype, including bf16, which CuPy cannot add natively; bf16 is rounded to nearest-even.
    """
    import cupy
    import cupyx

    dense = cupy.zeros((M, K), dtype=cupy.float32)
    nnz = int(colind.size)
    if nnz:
        rows = cupy.searchsorted(rowptr, cupy.arange(nnz, dtype=rowptr.dtype), side="right") - 1
        flat_index = rows.astype(cupy.int64) * K + colind.astype(cupy.int64)
        if values.dtype == cupy.uint16:
            as_float = (values.astype(cupy.uint32) << 16).view(cupy.float32)
        else:
            as_float = values.astype(cupy.float32, copy=False)
        cupyx.scatter_add(dense.ravel(), flat_index, as_float)
    if values.dtype == cupy.uint16:
        bits = dense.view(cupy.uint32)
        bits += (bits >> 16) & 1
        bits += 0x7FFF
        bits >>= 16
        return bits.astype(cupy.uint16)
    return dense.astype(values.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# Candidate collection


def _collect(candidates: Sequence[_Candidate]) -> list[BaselineCall]:
    """Keeps, per candidate, the first variant that builds and survives one synchronized trial run.

    Rejections are expected (libraries support only some dtype/algorithm/layout combinations),
    so they are logged at debug level rather than raised.
    """
    import cupy

    calls: list[BaselineCall] = []
    for name, variants in candidates:
        for build in variants:
            try:
                call = build()
                call.run()
                cupy.cuda.get_current_stream().synchronize()
            except Exception as exc:  # any failure disqualifies the configuration
                log.debug("baseline_skipped", candidate=name, error=repr(exc))
                continue
            calls.append(call)
            break
    return calls


def _single(name: str, builder: Callable[..., BaselineCall], *args: Any) -> _Candidate:
    """A candidate with one way to build it."""
    return name, [functools.partial(builder, name, *args)]


def _check_operands(
    dtype_name: str, values: _Array, dense: _Array, shape: tuple[int, ...]
) -> None:
    """Rejects mismatched inputs up front: descriptors take raw pointers, so a copy made here
    would silently detach the baselines from later in-place changes to the caller's arrays."""
    if dtype_name not in _STORAGE_DTYPE:
        raise ValueError(f"unknown dtype_name {dtype_name!r}; expected one of {sorted(_STORAGE_DTYPE)}")
    expected = _STORAGE_DTYPE[dtype_name]
    if values.dtype.name != expected or dense.dtype.name != expected:
        raise ValueError(
            f"{dtype_name} expects {expected} storage, got values {values.dtype}, dense {dense.dtype}"
        )
    if dense.shape != shape or not dense.flags.c_contiguous:
        raise ValueError(f"dense operand must be C-contiguous with shape {shape}, got {dense.shape}")


# ---------------------------------------------------------------------------------------------
# cuSPARSE generic API through CuPy's low-level bindings


@functools.cache
def _libcusparse() -> ctypes.CDLL:
    """The libcusparse CuPy already loaded; CuPy 14's bindings do not wrap the *_preprocess calls.

    Opening the exact mapped path returns the same library instance, so handles and descriptors
    created through CuPy are valid here.
    """
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and "/libcusparse.so" in fields[5]:
                return ctypes.CDLL(fields[5].strip())
    return ctypes.CDLL("libcusparse.so.12")


@functools.cache
def _preprocess_function(symbol: str) -> Any:
    """`cusparseSpMV_preprocess` or `cusparseSpMM_preprocess` with its C prototype declared."""
    function = getattr(_libcusparse(), symbol)
    pointer, enum = ctypes.c_void_p, ctypes.c_int
    if symbol == "cusparseSpMV_preprocess":
        # handle, opA, alpha, matA, vecX, beta, vecY, computeType, alg, externalBuffer
        function.argtypes = [pointer, enum, pointer, pointer, pointer, pointer, pointer, enum, enum, pointer]
    else:
        # handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, externalBuffer
        function.argtypes = [
            pointer, enum, enum, pointer, pointer, pointer, pointer, pointer, enum, enum, pointer
        ]
    function.restype = ctypes.c_int
    return function


def _run_preprocess(symbol: str, handle: int, *args: int) -> None:
    """Runs a cuSPARSE preprocess on the current CuPy stream, which CuPy sets only in its own calls."""
    import cupy
    from cupy_backends.cuda.libs import cusparse as cs

    cs.setStream(handle, cupy.cuda.get_current_stream().ptr)
    status = _preprocess_function(symbol)(handle, *args)
    if status != 0:
        raise RuntimeError(f"{symbol} returned cusparseStatus_t {status}")


def _create_csr(owner: _Owner, rowptr: _Array, colind: _Array, values: _Array,
                M: int, K: int, value_type: int) -> int:
    from cupy_backends.cuda.libs import cusparse as cs

    owner.keep(rowptr, colind, values)
    return owner.descriptor(
        cs.destroySpMat,
        cs.createCsr(
            M, K, int(colind.size), rowptr.data.ptr, colind.data.ptr, values.data.ptr,
            cs.CUSPARSE_INDEX_32I, cs.CUSPARSE_INDEX_32I, cs.CUSPARSE_INDEX_BASE_ZERO, value_type,
        ),
    )


def _host_scalars(owner: _Owner) -> tuple[int, int]:
    """Host pointers to alpha=1 and beta=0 as fp32, matching the fp32 compute type."""
    import numpy

    scalars = numpy.array([1.0, 0.0], dtype=numpy.float32)
    owner.keep(scalars)
    return scalars.ctypes.data, scalars.ctypes.data + scalars.itemsize


def _workspace(owner: _Owner, size: int) -> int:
    import cupy

    buffer = cupy.empty(max(size, 1), dtype=cupy.uint8)
    owner.keep(buffer)
    return buffer.data.ptr


def _cusparse_spmv(name: str, rowptr: _Array, colind: _Array, values: _Array,
                   x: _Array, M: int, K: int, dtype_name: str, alg_key: str,
                   preprocess: bool) -> BaselineCall:
    import cupy
    from cupy_backends.cuda.libs import cusparse as cs

    alg, alg_label = _SPMV_ALGS[alg_key]
    value_type = _CUDA_VALUE_TYPE[dtype_name]
    handle = cupy.cuda.device.get_cusparse_handle()
    owner = _Owner()
    y = cupy.empty(M, dtype=values.dtype)
    owner.keep(x, y)
    mat_a = _create_csr(owner, rowptr, colind, values, M, K, value_type)
    vec_x = owner.descriptor(cs.destroyDnVec, cs.createDnVec(K, x.data.ptr, value_type))
    vec_y = owner.descriptor(cs.destroyDnVec, cs.createDnVec(M, y.data.ptr, value_type))
    alpha, beta = _host_scalars(owner)
    op_a = cs.CUSPARSE_OPERATION_NON_TRANSPOSE
    host_mode = cs.CUSPARSE_POINTER_MODE_HOST
    cs.setPointerMode(handle, host_mode)
    size = cs.spMV_bufferSize(handle, op_a, alpha, mat_a, vec_x, beta, vec_y, _CUDA_R_32F, alg)
    work = _workspace(owner, size)
    notes = [f"cuSPARSE descriptors, {size}-byte workspace"]
    if preprocess:
        _run_preprocess("cusparseSpMV_preprocess", handle, op_a, alpha, mat_a, vec_x, beta, vec_y,
                        _CUDA_R_32F, alg, work)
        notes.append("cusparseSpMV_preprocess")

    def launch() -> None:
        # The handle is shared with the rest of CuPy; host scalars need host pointer mode.
        cs.setPointerMode(handle, host_mode)
        cs.spMV(handle, op_a, alpha, mat_a, vec_x, beta, vec_y, _CUDA_R_32F, alg, work)

    config = f"cusparseSpMV {alg_label}, {dtype_name} matrix/vectors, fp32 compute"
    if preprocess:
        config += ", cusparseSpMV_preprocess at preparation"
    return BaselineCall(name, "cuSPARSE", config, _OwnedLaunch(owner, launch), y, "; ".join(notes))


def _cusparse_spmm(name: str, rowptr: _Array, colind: _Array, values: _Array,
                   B: _Array, M: int, K: int, N: int, dtype_name: str, alg_key: str,
                   layout: str, preprocess: bool) -> BaselineCall:
    import cupy
    from cupy_backends.cuda.libs import cusparse as cs

    alg, alg_label = _SPMM_ALGS[alg_key]
    value_type = _CUDA_VALUE_TYPE[dtype_name]
    handle = cupy.cuda.device.get_cusparse_handle()
    owner = _Owner()
    output = cupy.empty((M, N), dtype=values.dtype)
    if layout == "row":
        dense_b, dense_c, order, ld_b, ld_c = B, output, cs.CUSPARSE_ORDER_ROW, N, N
    else:
        dense_b = cupy.asfortranarray(B)
        dense_c = cupy.empty((M, N), dtype=values.dtype, order="F")
        order, ld_b, ld_c = cs.CUSPARSE_ORDER_COL, K, M
    owner.keep(dense_b, dense_c, output)
    mat_a = _create_csr(owner, rowptr, colind, values, M, K, value_type)
    mat_b = owner.descriptor(cs.destroyDnMat, cs.createDnMat(K, N, ld_b, dense_b.data.ptr, value_type, order))
    mat_c = owner.descriptor(cs.destroyDnMat, cs.createDnMat(M, N, ld_c, dense_c.data.ptr, value_type, order))
    alpha, beta = _host_scalars(owner)
    op = cs.CUSPARSE_OPERATION_NON_TRANSPOSE
    host_mode = cs.CUSPARSE_POINTER_MODE_HOST
    cs.setPointerMode(handle, host_mode)
    size = cs.spMM_bufferSize(handle, op, op, alpha, mat_a, mat_b, beta, mat_c, _CUDA_R_32F, alg)
    work = _workspace(owner, size)
    notes = [f"cuSPARSE descriptors, {size}-byte workspace"]
    if layout == "col":
        notes.append("column-major copy of B")
    if preprocess:
        _run_preprocess("cusparseSpMM_preprocess", handle, op, op, alpha, mat_a, mat_b, beta, mat_c,
                        _CUDA_R_32F, alg, work)
        notes.append("cusparseSpMM_preprocess")

    def spmm() -> None:
        # The handle is shared with the rest of CuPy; host scalars need host pointer mode.
        cs.setPointerMode(handle, host_mode)
        cs.spMM(handle, op, op, alpha, mat_a, mat_b, beta, mat_c, _CUDA_R_32F, alg, work)

    def spmm_then_to_row_major() -> None:
        spmm()
        cupy.copyto(output, dense_c)

    if layout == "row":
        launch, layout_text = spmm, "B/C row-major"
    else:
        launch = spmm_then_to_row_major
        layout_text = "B/C column-major, C copied to row-major by one CuPy elementwise copy inside the call"
    config = f"cusparseSpMM {alg_label}, {layout_text}, {dtype_name} matrices, fp32 compute"
    if preprocess:
        config += ", cusparseSpMM_preprocess at preparation"
    return BaselineCall(name, "cuSPARSE", config, _OwnedLaunch(owner, launch), output, "; ".join(notes))


# ---------------------------------------------------------------------------------------------
# PyTorch front ends (sparse CSR matmul on cuSPARSE, dense matmul on cuBLAS)


@functools.cache
def _torch_module() -> ModuleType | None:
    """torch if it imports and sees a GPU; otherwise None, and its candidates are not offered."""
    try:
        import torch
    except Exception as exc:  # torch is optional
        log.debug("torch_unavailable", error=repr(exc))
        return None
    if not torch.cuda.is_available():
        log.debug("torch_unavailable", error="torch.cuda.is_available() is False")
        return None
    return torch


def _torch_stream(torch: ModuleType) -> Any:
    """Torch's handle on the current CuPy stream, so torch work is ordered and timed with the harness."""
    import cupy

    device = cupy.cuda.Device().id
    pointer = cupy.cuda.get_current_stream().ptr
    stream = _TORCH_STREAMS.get((device, pointer))
    if stream is None:
        torch_device = torch.device("cuda", device)
        # Pointer 0 is the legacy default stream, which is also torch's default stream.
        stream = (torch.cuda.default_stream(torch_device) if pointer == 0
                  else torch.cuda.ExternalStream(pointer, device=torch_device))
        _TORCH_STREAMS[(device, pointer)] = stream
    return stream


def _torch_view(torch: ModuleType, array: _Array, bf16: bool = False) -> Any:
    """Zero-copy torch tensor over a CuPy array; bf16 raw bits go through int16 to a bfloat16 view."""
    import cupy

    if bf16:
        return torch.from_dlpack(array.view(cupy.int16)).view(torch.bfloat16)
    return torch.from_dlpack(array)


def _torch_csr(torch: ModuleType, rowptr: _Array, colind: _Array, values: _Array,
               M: int, K: int, dtype_name: str, index_bits: int) -> tuple[Any, str]:
    """The CSR matrix as a torch sparse tensor over the same value buffer, plus a preparation note."""
    import cupy

    if index_bits == 64:
        rowptr, colind = rowptr.astype(cupy.int64), colind.astype(cupy.int64)
        note = "int64 copies of rowptr/colind; torch sparse CSR tensor built once"
    else:
        note = "torch sparse CSR tensor built once over the int32 buffers (zero-copy)"
    with warnings.catch_warnings():
        # torch warns that sparse CSR is "beta" and that invariant checks are off; both are known
        # here, and the CSR arrives already validated.
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
        warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
        matrix = torch.sparse_csr_tensor(
            _torch_view(torch, rowptr), _torch_view(torch, colind),
            _torch_view(torch, values, dtype_name == "bf16"), size=(M, K), check_invariants=False,
        )
    return matrix, note


def _torch_launch(torch: ModuleType, compute: Callable[[], None]) -> Callable[[], None]:
    def launch() -> None:
        with torch.cuda.stream(_torch_stream(torch)):
            compute()

    return launch


def _torch_csr_spmv(name: str, torch: ModuleType, rowptr: _Array, colind: _Array,
                    values: _Array, x: _Array, M: int, K: int, dtype_name: str,
                    index_bits: int, form: str, use_out: bool) -> BaselineCall:
    """torch.mv on the CSR tensor, or torch.mm with x as a (K, 1) matrix (torch's mv lacks some dtypes)."""
    import cupy

    owner = _Owner()
    matrix, note = _torch_csr(torch, rowptr, colind, values, M, K, dtype_name, index_bits)
    y = cupy.empty(M, dtype=values.dtype)
    x_t = _torch_view(torch, x, dtype_name == "bf16")
    y_t = _torch_view(torch, y, dtype_name == "bf16")
    owner.keep(matrix, x_t, y_t)
    if form == "mm":
        x_t, y_t = x_t.view(K, 1), y_t.view(M, 1)
        product, call_text = torch.mm, "torch.mm(A_csr, x[:, None])"
    else:
        product, call_text = torch.mv, "torch.mv(A_csr, x)"

    if use_out:
        def compute() -> None:
            product(matrix, x_t, out=y_t)
    else:
        def compute() -> None:
            y_t.copy_(product(matrix, x_t))

    result_text = "out= into the output" if use_out else "result copied into the output"
    config = (f"PyTorch sparse CSR matmul (cuSPARSE): {call_text}, int{index_bits} indices, "
              f"{dtype_name}, {result_text}")
    run = _OwnedLaunch(owner, _torch_launch(torch, compute))
    return BaselineCall(name, "cuSPARSE", config, run, y, note)


def _torch_csr_spmm(name: str, torch: ModuleType, rowptr: _Array, colind: _Array,
                    values: _Array, B: _Array, M: int, K: int, N: int, dtype_name: str,
                    index_bits: int, use_out: bool) -> BaselineCall:
    import cupy

    owner = _Owner()
    matrix, note = _torch_csr(torch, rowptr, colind, values, M, K, dtype_name, index_bits)
    output = cupy.empty((M, N), dtype=values.dtype)
    b_t = _torch_view(torch, B, dtype_name == "bf16")
    c_t = _torch_view(torch, output, dtype_name == "bf16")
    owner.keep(matrix, b_t, c_t)

    if use_out:
        def compute() -> None:
            torch.mm(matrix, b_t, out=c_t)
    else:
        def compute() -> None:
            c_t.copy_(torch.mm(matrix, b_t))

    result_text = "out= into the output" if use_out else "result copied into the output"
    config = (f"PyTorch sparse CSR matmul (cuSPARSE): torch.mm(A_csr, B), int{index_bits} indices, "
              f"{dtype_name}, {result_text}")
    run = _OwnedLaunch(owner, _torch_launch(torch, compute))
    return BaselineCall(name, "cuSPARSE", config, run, output, note)


# ---------------------------------------------------------------------------------------------
# Dense cuBLAS on the densified matrix


_DENSE_CONFIG = "dense GEMM/GEMV on the densified matrix (densified once)"
_DENSE_NOTE = "A densified once to an (M, K) dense array; later changes to A's values are not seen"


def _densify_within_limit(rowptr: _Array, colind: _Array, values: _Array,
                          M: int, K: int) -> _Array:
    """densify(), refused above 4 GiB: beyond that the dense baseline is not a realistic option."""
    size = M * K * values.dtype.itemsize
    if size > _DENSE_LIMIT_BYTES:
        raise MemoryError(f"densified matrix would take {size} bytes (limit {_DENSE_LIMIT_BYTES})")
    return densify(rowptr, colind, values, M, K)


def _cupy_dense_spmv(name: str, densified: Callable[[], _Array], x: _Array, M: int,
                     form: str) -> BaselineCall:
    """cupy.matmul (cublasGemmEx with n=1) or cupy.cublas.gemv (cublasSgemv, fp32 only)."""
    import cupy
    import cupy.cublas

    dense = densified()
    y = cupy.empty(M, dtype=dense.dtype)
    owner = _Owner()
    owner.keep(dense, x, y)
    if form == "gemv":
        def launch() -> None:
            cupy.cublas.gemv("N", 1.0, dense, x, 0.0, y)
        call_text = "cupy.cublas.gemv (cublasSgemv)"
    else:
        def launch() -> None:
            cupy.matmul(dense, x, out=y)
        call_text = "cupy.matmul (cublasGemmEx, fp32 compute)"
    config = f"{_DENSE_CONFIG}: {call_text}, {dense.dtype}"
    return BaselineCall(name, "cuBLAS", config, _OwnedLaunch(owner, launch), y, _DENSE_NOTE)


def _cupy_dense_spmm(name: str, densified: Callable[[], _Array], B: _Array, M: int,
                     N: int) -> BaselineCall:
    import cupy

    dense = densified()
    output = cupy.empty((M, N), dtype=dense.dtype)
    owner = _Owner()
    owner.keep(dense, B, output)

    def launch() -> None:
        cupy.matmul(dense, B, out=output)

    config = f"{_DENSE_CONFIG}: cupy.matmul (cublasGemmEx, fp32 compute), {dense.dtype}"
    return BaselineCall(name, "cuBLAS", config, _OwnedLaunch(owner, launch), output, _DENSE_NOTE)


def _torch_dense_spmv(name: str, torch: ModuleType, densified: Callable[[], _Array],
                      x: _Array, M: int, dtype_name: str) -> BaselineCall:
    """torch.mv on zero-copy views; the only dense route for bf16, which CuPy cannot multiply."""
    import cupy

    dense = densified()
    y = cupy.empty(M, dtype=dense.dtype)
    bf16 = dtype_name == "bf16"
    dense_t, x_t, y_t = (_torch_view(torch, array, bf16) for array in (dense, x, y))
    owner = _Owner()
    owner.keep(dense, dense_t, x_t, y_t)

    def compute() -> None:
        torch.mv(dense_t, x_t, out=y_t)

    config = f"{_DENSE_CONFIG}: torch.mv, {dtype_name}, torch default matmul precision"
    run = _OwnedLaunch(owner, _torch_launch(torch, compute))
    return BaselineCall(name, "cuBLAS", config, run, y, _DENSE_NOTE)


def _torch_dense_spmm(name: str, torch: ModuleType, densified: Callable[[], _Array],
                      B: _Array, M: int, N: int, dtype_name: str) -> BaselineCall:
    """torch.mm on zero-copy views; the only dense route for bf16, which CuPy cannot multiply."""
    import cupy

    dense = densified()
    output = cupy.empty((M, N), dtype=dense.dtype)
    bf16 = dtype_name == "bf16"
    dense_t, b_t, c_t = (_torch_view(torch, array, bf16) for array in (dense, B, output))
    owner = _Owner()
    owner.keep(dense, dense_t, b_t, c_t)

    def compute() -> None:
        torch.mm(dense_t, b_t, out=c_t)

    config = f"{_DENSE_CONFIG}: torch.mm, {dtype_name}, torch default matmul precision"
    run = _OwnedLaunch(owner, _torch_launch(torch, compute))
    return BaselineCall(name, "cuBLAS", config, run, output, _DENSE_NOTE)
