"""cuSPARSE's generic API called directly, in every algorithm, dense layout and preprocessing it offers.

Library defaults are weak: CuPy's ``csr_matrix @ dense`` is 3-12x slower than PyTorch's CSR matmul (an H200
figure given in issue 2) and cupyx refuses fp16 SpMM, so the descriptors are built through CuPy's low-level
bindings, and the preprocess calls they lack through ctypes. SpMV and SpMM share one builder."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from sparseditto.tools.baselines import register
from sparseditto.tools.baselines.common import Array, BaselineCall, Candidate, OwnedLaunch, Owner, candidate
from sparseditto.tools.baselines.csr import CsrProduct, csr_product

if TYPE_CHECKING:
    from sparseditto.tools.families.base import Problem

LIBRARY = "cusparse"

# cudaDataType_t values (library_types.h); stable across CUDA releases.
_CUDA_R_32F = 0
_CUDA_VALUE_TYPE = {"fp32": 0, "fp16": 2, "bf16": 14}


# Algorithm values from cusparse.h by entry point (SpMV, SpMM). CuPy's bindings only export the legacy
# aliases (CUSPARSE_CSRMV_ALG1, CUSPARSE_CSRMM_ALG1, ...) and lack SpMM CSR_ALG2/ALG3.
_ALGORITHMS = {
    "SpMV": {"default": (0, "CUSPARSE_SPMV_ALG_DEFAULT"), "csr_alg1": (2, "CUSPARSE_SPMV_CSR_ALG1"),
             "csr_alg2": (3, "CUSPARSE_SPMV_CSR_ALG2")},
    "SpMM": {"default": (0, "CUSPARSE_SPMM_ALG_DEFAULT"), "csr_alg1": (4, "CUSPARSE_SPMM_CSR_ALG1"),
             "csr_alg2": (6, "CUSPARSE_SPMM_CSR_ALG2"), "csr_alg3": (12, "CUSPARSE_SPMM_CSR_ALG3")},
}
# The algorithms each preprocess is tried with (cuSPARSE documents SpMM's as effective only for these).
_PREPROCESSED = {"SpMV": {"default", "csr_alg1", "csr_alg2"}, "SpMM": {"csr_alg1", "csr_alg3"}}
# Transpose arguments of each entry point: opA, and opB for the dense matrix of SpMM.
_TRANSPOSE_ARGS = {"SpMV": 1, "SpMM": 2}
_LAYOUT_TEXT = {
    "row": "B/C row-major",
    "col": "B/C column-major, C copied to row-major by one CuPy elementwise copy inside the call",
}


@register("csr_spmv", LIBRARY)
@register("csr_spmm", LIBRARY)
def candidates(problem: Problem, device: Mapping[str, Array]) -> list[Candidate]:
    """Every algorithm x dense layout (matrices only) x preprocess (where tried), in a stable order."""
    product = csr_product(problem, device)
    entry = "SpMV" if product.vector else "SpMM"
    found: list[Candidate] = []
    for alg_key in _ALGORITHMS[entry]:
        for layout in (None,) if product.vector else ("row", "col"):
            for preprocess in (False, True) if alg_key in _PREPROCESSED[entry] else (False,):
                name = "_".join(part for part in ("cusparse", entry.lower(), alg_key, layout) if part)
                name += "_pre" if preprocess else ""
                found.append(candidate(name, _build, product, entry, alg_key, layout, preprocess))
    return found


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
def _preprocess_function(entry: str) -> Callable[..., int]:
    """`cusparseSpMV_preprocess` or `cusparseSpMM_preprocess` with its C prototype declared:
    handle, opA (and opB for SpMM), alpha, matA, dense in, beta, dense out, computeType, alg, externalBuffer."""
    function = getattr(_libcusparse(), f"cusparse{entry}_preprocess")
    pointer, enum = ctypes.c_void_p, ctypes.c_int
    function.argtypes = [pointer] + [enum] * _TRANSPOSE_ARGS[entry] + [pointer] * 5 + [enum, enum, pointer]
    function.restype = ctypes.c_int
    return function


def _run_preprocess(entry: str, handle: int, *args: int) -> None:
    """Runs a cuSPARSE preprocess on the current CuPy stream, which CuPy sets only in its own calls."""
    import cupy
    from cupy_backends.cuda.libs import cusparse as cs

    cs.setStream(handle, cupy.cuda.get_current_stream().ptr)
    status = _preprocess_function(entry)(handle, *args)
    if status != 0:
        raise RuntimeError(f"cusparse{entry}_preprocess returned cusparseStatus_t {status}")


def _create_dense(owner: Owner, array: Array, value_type: int) -> int:
    """A dense vector descriptor, or a dense matrix descriptor in the array's own order (C or Fortran)."""
    from cupy_backends.cuda.libs import cusparse as cs

    owner.keep(array)
    if array.ndim == 1:
        return owner.descriptor(cs.destroyDnVec, cs.createDnVec(array.size, array.data.ptr, value_type))
    rows, cols = array.shape
    order, leading = (cs.CUSPARSE_ORDER_ROW, cols) if array.flags.c_contiguous else (cs.CUSPARSE_ORDER_COL, rows)
    return owner.descriptor(cs.destroyDnMat, cs.createDnMat(rows, cols, leading, array.data.ptr, value_type, order))


def _build(name: str, product: CsrProduct, entry: str, alg_key: str, layout: str | None,
           preprocess: bool) -> BaselineCall:
    import cupy
    import numpy
    from cupy_backends.cuda.libs import cusparse as cs

    alg, alg_label = _ALGORITHMS[entry][alg_key]
    value_type = _CUDA_VALUE_TYPE[product.dtype]
    handle = cupy.cuda.device.get_cusparse_handle()
    owner = Owner()
    output = product.new_output()
    if layout == "col":
        dense_in = cupy.asfortranarray(product.dense)
        dense_out = cupy.empty(output.shape, dtype=output.dtype, order="F")
    else:
        dense_in, dense_out = product.dense, output
    owner.keep(output, product.rowptr, product.colind, product.values)
    mat_a = owner.descriptor(cs.destroySpMat, cs.createCsr(
        product.M, product.K, int(product.colind.size), product.rowptr.data.ptr, product.colind.data.ptr,
        product.values.data.ptr, cs.CUSPARSE_INDEX_32I, cs.CUSPARSE_INDEX_32I, cs.CUSPARSE_INDEX_BASE_ZERO, value_type))
    in_desc = _create_dense(owner, dense_in, value_type)
    out_desc = _create_dense(owner, dense_out, value_type)
    scalars = numpy.array([1.0, 0.0], dtype=numpy.float32)  # host alpha=1, beta=0 for the fp32 compute type
    alpha, beta = scalars.ctypes.data, scalars.ctypes.data + scalars.itemsize
    ops = (cs.CUSPARSE_OPERATION_NON_TRANSPOSE,) * _TRANSPOSE_ARGS[entry]
    host_mode = cs.CUSPARSE_POINTER_MODE_HOST
    binding = "sp" + entry[2:]  # CuPy's names: spMV, spMV_bufferSize, spMM, spMM_bufferSize
    cs.setPointerMode(handle, host_mode)
    size = getattr(cs, f"{binding}_bufferSize")(handle, *ops, alpha, mat_a, in_desc, beta, out_desc, _CUDA_R_32F, alg)
    workspace = cupy.empty(max(size, 1), dtype=cupy.uint8)
    owner.keep(scalars, workspace)
    args = (handle, *ops, alpha, mat_a, in_desc, beta, out_desc, _CUDA_R_32F, alg, workspace.data.ptr)
    notes = [f"cuSPARSE descriptors, {size}-byte workspace"] + (["column-major copy of B"] if layout == "col" else [])
    if preprocess:
        _run_preprocess(entry, *args)
        notes.append(f"cusparse{entry}_preprocess")
    compute = getattr(cs, binding)

    def launch() -> None:
        # The handle is shared with the rest of CuPy; host scalars need host pointer mode.
        cs.setPointerMode(handle, host_mode)
        compute(*args)
        if dense_out is not output:  # column-major C back to the row-major output
            cupy.copyto(output, dense_out)

    layout_text = [_LAYOUT_TEXT[layout]] if layout else []
    operands = "matrix/vectors" if product.vector else "matrices"
    preprocess_text = [f"cusparse{entry}_preprocess at preparation"] if preprocess else []
    config = ", ".join([f"cusparse{entry} {alg_label}", *layout_text, f"{product.dtype} {operands}", "fp32 compute",
                        *preprocess_text])
    return BaselineCall(name, LIBRARY, config, OwnedLaunch(owner, launch), output, "; ".join(notes))
