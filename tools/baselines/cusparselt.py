"""cuSPARSELt, the vendor library for 2:4 products on sparse tensor cores: its C API through ctypes, and PyTorch's
front end to it (torch._cslt_compress / torch._cslt_sparse_mm), each at its best.

Direct route, per configuration: A is checked on the device to be 2:4 along K as the configuration's descriptor
reads it; handle, descriptors (structured for A, dense for B and C), matmul descriptor with the epilogue,
algorithm selection, plan; then the library's own 2:4 check, the compression of A, and cusparseLtMatmulSearch picks
the fastest algorithm id and split-K on the real operands. All of that is one-time preparation; the timed call is
cusparseLtMatmul alone on the harness's current stream (plus, where a configuration needs them, B's transposition
and the epilogue steps the library cannot fuse). Configurations: the structured operand first (D = A B, D
row-major, bias/ReLU/GELU/alpha fused) or second (D^T = B^T A^T in C's memory, whose rows are C's columns, so the
bias and activation run in a separate pass), each with B as given (row-major) or transposed in the call
(column-major); each is tried with every equivalent (order, transpose) description of the same memory, since the
library supports only some. In every description the structured operand's groups of four run along K.

PyTorch's route re-creates descriptors and a plan inside every torch._cslt_sparse_mm call (host work that a timed
call would otherwise carry), so its call is captured once in a CUDA graph and the timed call replays it.

Enum values and prototypes are those of cusparseLt.h 0.8.1 and 0.10.0 (identical there), cusparse.h and
library_types.h. A library that does not load is reported as 'unavailable: <reason>', never raised.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from sparseditto.tools.baselines import register
from sparseditto.tools.baselines.byte_transpose import byte_transposer
from sparseditto.tools.baselines.common import Array, BaselineCall, Candidate, OwnedLaunch, Owner, torch_run
from sparseditto.tools.baselines.sparse24_dense import (
    FAMILY, Sparse24Operands, epilogue_text, log_unavailable, separate_epilogue, sparse24_gemm,
    sparse24_operands, torch_status, torch_tensor,
)

if TYPE_CHECKING:
    from sparseditto.tools.families.base import Problem

LIBRARY = "cusparselt"
TORCH_LIBRARY = "torch_cusparselt"

# The header constants used here, by their C names.
HEADER_ENUMS = {
    # cusparse.h
    "CUSPARSE_STATUS_SUCCESS": 0,
    "CUSPARSE_OPERATION_NON_TRANSPOSE": 0,
    "CUSPARSE_OPERATION_TRANSPOSE": 1,
    "CUSPARSE_ORDER_COL": 1,
    "CUSPARSE_ORDER_ROW": 2,
    # library_types.h (cudaDataType_t, libraryPropertyType)
    "CUDA_R_16F": 2,
    "CUDA_R_16BF": 14,
    "CUDA_R_8F_E4M3": 28,
    "MAJOR_VERSION": 0,
    "MINOR_VERSION": 1,
    "PATCH_LEVEL": 2,
    # cusparseLt.h
    "CUSPARSELT_SPARSITY_50_PERCENT": 0,
    "CUSPARSE_COMPUTE_32F": 2,
    "CUSPARSELT_MATMUL_ACTIVATION_RELU": 0,
    "CUSPARSELT_MATMUL_ACTIVATION_GELU": 3,
    "CUSPARSELT_MATMUL_BIAS_POINTER": 8,
    "CUSPARSELT_MATMUL_ALG_DEFAULT": 0,
    "CUSPARSELT_MATMUL_ALG_CONFIG_ID": 0,
    "CUSPARSELT_MATMUL_SPLIT_K": 3,
    "CUSPARSELT_MATMUL_SPLIT_K_MODE": 4,
}
_E = HEADER_ENUMS
_VALUE_TYPE = {"fp16": _E["CUDA_R_16F"], "bf16": _E["CUDA_R_16BF"], "fp8_e4m3": _E["CUDA_R_8F_E4M3"]}
_OP = {"N": _E["CUSPARSE_OPERATION_NON_TRANSPOSE"], "T": _E["CUSPARSE_OPERATION_TRANSPOSE"]}
_ORDER = {"row": _E["CUSPARSE_ORDER_ROW"], "col": _E["CUSPARSE_ORDER_COL"]}
_SPLIT_K_MODES = {1: "one kernel", 2: "two kernels", 3: "heuristic", 4: "data-parallel", 5: "split-K", 6: "stream-K"}

# Opaque structs are `alignas(16) uint8_t data[512]` in 0.8+ headers and `uint8_t data[1024]` before: 1024 fits both.
OPAQUE_BYTES = 1024
OPAQUE_ALIGN = 16
# Pointers and leading dimensions the descriptors promise, in bytes (CuPy allocations are 256-byte aligned).
_ALIGNMENT = 16

_P, _INT, _I32, _I64, _U32, _SIZE = (ctypes.c_void_p, ctypes.c_int, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32,
                                     ctypes.c_size_t)
# Argument types of each entry point used (every enum is a C int); all return cusparseStatus_t except where noted.
SIGNATURES: dict[str, tuple[Any, ...]] = {
    "cusparseLtGetProperty": (_INT, _P),
    "cusparseLtInit": (_P,),
    "cusparseLtDestroy": (_P,),
    "cusparseLtDenseDescriptorInit": (_P, _P, _I64, _I64, _I64, _U32, _INT, _INT),
    "cusparseLtStructuredDescriptorInit": (_P, _P, _I64, _I64, _I64, _U32, _INT, _INT, _INT),
    "cusparseLtMatDescriptorDestroy": (_P,),
    "cusparseLtMatmulDescriptorInit": (_P, _P, _INT, _INT, _P, _P, _P, _P, _INT),
    "cusparseLtMatmulDescSetAttribute": (_P, _P, _INT, _P, _SIZE),
    "cusparseLtMatmulAlgSelectionInit": (_P, _P, _P, _INT),
    "cusparseLtMatmulAlgGetAttribute": (_P, _P, _INT, _P, _SIZE),
    "cusparseLtMatmulPlanInit": (_P, _P, _P, _P),
    "cusparseLtMatmulPlanDestroy": (_P,),
    "cusparseLtMatmulGetWorkspace": (_P, _P, _P),
    "cusparseLtSpMMAPruneCheck": (_P, _P, _P, _P, _P),
    "cusparseLtSpMMACompressedSize": (_P, _P, _P, _P),
    "cusparseLtSpMMACompress": (_P, _P, _P, _P, _P, _P),
    "cusparseLtMatmulSearch": (_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I32),
    "cusparseLtMatmul": (_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I32),
}
# Entry points of recent releases only: the algorithm selection's destructor (0.8+, which requires calling it) and
# the status names (0.8+; `const char*`).
OPTIONAL_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "cusparseLtMatmulAlgSelectionDestroy": (_P,),
    "cusparseLtGetErrorName": (_INT,),
}

_LIBRARY_FILE = "libcusparseLt.so.0"
# Where wheels put the library under a `site-packages` folder: the nvidia-cusparselt wheels (0.8 and torch's cu12
# dependency: nvidia/cusparselt/lib; 0.10: the CUDA-version folder shared with the other CUDA 13 wheels), and torch
# builds that bundle it (torch/lib).
_WHEEL_FOLDERS = ("nvidia/cusparselt/lib", "nvidia/cu13/lib", "nvidia/cu12/lib", "torch/lib")


class LibraryUnavailable(RuntimeError):
    """cuSPARSELt cannot be used here; the message is the reason."""


class CusparseLtError(RuntimeError):
    """A cuSPARSELt call returned a status other than success."""


# -- the shared library ---------------------------------------------------------------------------------------------

def _mapped_copies() -> list[str]:
    """The libcusparseLt files this process has already mapped (torch's, once torch ran a cuSPARSELt op or linked
    it at import): loading the same file again shares it instead of adding a second copy."""
    try:
        with open("/proc/self/maps") as maps:
            fields = [line.split(maxsplit=5) for line in maps]
    except OSError:
        return []
    return sorted({f[5].strip() for f in fields if len(f) == 6 and "/libcusparseLt.so" in f[5]})


def library_paths() -> list[str]:
    """Where libcusparseLt may be, best first: the copy this process already mapped, the wheel folders under every
    import path (each entry of sys.path scanned directly: a `nvidia/__init__.py` in one site folder would hide the
    namespace's other folders from find_spec), then the dynamic linker's name."""
    found = _mapped_copies()
    for root in dict.fromkeys(sys.path):
        found += [str(Path(root or ".", folder, _LIBRARY_FILE)) for folder in _WHEEL_FOLDERS
                  if Path(root or ".", folder, _LIBRARY_FILE).is_file()]
    found += [name for name in (ctypes.util.find_library("cusparseLt"), _LIBRARY_FILE) if name]
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class CusparseLt:
    """The loaded library with its prototypes declared; calls raise CusparseLtError on a failed status."""

    cdll: ctypes.CDLL
    path: str

    def __call__(self, name: str, *args: Any) -> None:
        status = getattr(self.cdll, name)(*args)
        if status != _E["CUSPARSE_STATUS_SUCCESS"]:
            raise CusparseLtError(f"{name} returned {self.status_name(status)}")

    def status_name(self, status: int) -> str:
        if hasattr(self.cdll, "cusparseLtGetErrorName"):
            return f"{self.cdll.cusparseLtGetErrorName(status).decode()} ({status})"
        return f"cusparseStatus_t {status}"

    def version(self) -> str:
        parts = []
        for prop in ("MAJOR_VERSION", "MINOR_VERSION", "PATCH_LEVEL"):
            value = ctypes.c_int()
            self("cusparseLtGetProperty", _E[prop], ctypes.byref(value))
            parts.append(str(value.value))
        return ".".join(parts)

    def destroyer(self, name: str) -> Callable[[int], None]:
        """A destroy function for common.Owner, which calls it with the struct's address."""
        return functools.partial(self, name)


def _declare(cdll: ctypes.CDLL) -> None:
    for name, argtypes in {**SIGNATURES, **OPTIONAL_SIGNATURES}.items():
        if not hasattr(cdll, name):
            if name in SIGNATURES:
                raise LibraryUnavailable(f"{cdll._name} has no {name}: not a cuSPARSELt 0.5 or newer")
            continue
        function = getattr(cdll, name)
        function.argtypes = list(argtypes)
        function.restype = ctypes.c_char_p if name == "cusparseLtGetErrorName" else ctypes.c_int


@functools.cache
def load() -> CusparseLt:
    """The first libcusparseLt that loads, has the entry points used and initialises a handle on the current GPU;
    otherwise LibraryUnavailable saying what was searched and why each file failed."""
    errors = []
    for path in library_paths():
        try:
            cdll = ctypes.CDLL(path)
            _declare(cdll)
        except (OSError, LibraryUnavailable) as exc:
            errors.append(f"{path}: {exc}")
            continue
        library = CusparseLt(cdll, path)
        probe = Opaque()
        try:
            library("cusparseLtInit", probe.ptr)
        except CusparseLtError as exc:
            errors.append(f"cuSPARSELt {library.version()} at {path} loads but {exc} (no usable GPU)")
            continue
        library("cusparseLtDestroy", probe.ptr)
        return library
    raise LibraryUnavailable(
        f"no loadable {_LIBRARY_FILE} ({'; '.join(errors)}); searched: the copies mapped in this process "
        f"({', '.join(_mapped_copies()) or 'none: torch has not loaded one'}), {', '.join(_WHEEL_FOLDERS)} under "
        "every sys.path entry, and the dynamic linker; nvidia-cusparselt-cu12 (torch's dependency) or -cu13 (the "
        "extra sparseditto[gpu]) provides it")


@functools.cache
def status() -> str:
    """'available: cuSPARSELt <version> (<path>)' or 'unavailable: <reason>'."""
    try:
        library = load()
    except LibraryUnavailable as exc:
        return f"unavailable: {exc}"
    return f"available: cuSPARSELt {library.version()} ({library.path})"


def torch_cslt_status() -> tuple[ModuleType | None, str]:
    """torch with its cuSPARSELt front end, or None with the reason it is not usable."""
    torch, text = torch_status()
    if torch is None:
        return None, text
    backend = getattr(torch.backends, "cusparselt", None)
    if not hasattr(torch, "_cslt_sparse_mm") or backend is None or not backend.is_available():
        return None, f"unavailable: torch {torch.__version__} is built without cuSPARSELt"
    return torch, f"{text}, cuSPARSELt {backend.version()}"


class Opaque:
    """Memory for one cuSPARSELt opaque struct, 16-byte aligned; `ptr` is what the C API takes."""

    def __init__(self) -> None:
        self._buffer = ctypes.create_string_buffer(OPAQUE_BYTES + OPAQUE_ALIGN)
        base = ctypes.addressof(self._buffer)
        self.ptr = (base + OPAQUE_ALIGN - 1) // OPAQUE_ALIGN * OPAQUE_ALIGN


# -- operand orders -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MatrixDesc:
    """A cuSPARSELt matrix descriptor's shape arguments: rows x cols stored in `order` with leading dimension ld."""

    rows: int
    cols: int
    ld: int
    order: str  # "row" | "col"


@dataclass(frozen=True)
class Layout:
    """One operand order: D = op(matA) op(matB), with matA, matB and D described over A's, B's and C's memory."""

    name: str
    sparse_first: bool  # the structured operand is matA (D = A B) or matB (D = B^T A^T)
    b_transposed: bool  # B is copied to column-major (B^T row-major) inside every call
    ops: tuple[str, str]  # opA, opB
    mat_a: MatrixDesc
    mat_b: MatrixDesc
    mat_d: MatrixDesc

    @property
    def fuses_bias(self) -> bool:
        """cuSPARSELt's bias runs along D's rows: C's rows only when D is C itself."""
        return self.sparse_first


def _describe(rows: int, cols: int, ld: int, row_major: bool, op: str) -> MatrixDesc:
    """The stored matrix behind op(X) (rows x cols after op) held in memory that is row-major with leading
    dimension ld when `row_major` (else column-major): a transposed op swaps the stored shape and the order."""
    stored = (rows, cols) if op == "N" else (cols, rows)
    flips = op == "T"
    order = "row" if row_major != flips else "col"
    return MatrixDesc(*stored, ld, order)


def layouts(M: int, K: int, N: int) -> list[list[Layout]]:
    """Every configuration (a list of equivalent descriptions of the same memory, tried in order): the structured
    operand first or second, times B as given or transposed in the call, times (opA, opB)."""
    configurations = []
    for sparse_first in (True, False):
        for b_transposed in (False, True):
            name = f"cusparselt_{'ab' if sparse_first else 'btat'}_b{'col' if b_transposed else 'row'}"
            described = []
            for op_a in ("N", "T"):
                for op_b in ("N", "T"):
                    # B in memory: row-major K x N (ld N), or, transposed, row-major N x K (ld K) = column-major K x N
                    if sparse_first:  # D (M x N, row-major = C) = A (M x K) * B (K x N)
                        mat_a = _describe(M, K, K, True, op_a)
                        mat_b = (_describe(K, N, K, False, op_b) if b_transposed else _describe(K, N, N, True, op_b))
                        mat_d = MatrixDesc(M, N, N, "row")
                    else:  # D (N x M, column-major = C) = B^T (N x K) * A^T (K x M)
                        mat_a = (_describe(N, K, K, True, op_a) if b_transposed else _describe(N, K, N, False, op_a))
                        mat_b = _describe(K, M, K, False, op_b)
                        mat_d = MatrixDesc(N, M, N, "col")
                    described.append(Layout(name, sparse_first, b_transposed, (op_a, op_b), mat_a, mat_b, mat_d))
            configurations.append(described)
    return configurations


def structured_operand(layout: Layout) -> tuple[MatrixDesc, str]:
    """The structured operand's descriptor and op: matA when A comes first (D = A B), matB when second
    (D^T = B^T A^T)."""
    return (layout.mat_a, layout.ops[0]) if layout.sparse_first else (layout.mat_b, layout.ops[1])


def read_a(memory: Any, layout: Layout) -> Any:
    """A (M x K) as the layout's structured descriptor and op read it from A's memory (NumPy or CuPy), so that the
    2:4 check looks at exactly what cuSPARSELt is told; a description reaching past the memory is refused."""
    desc, op = structured_operand(layout)
    flat = memory.reshape(-1)
    steps = (desc.ld, 1) if desc.order == "row" else (1, desc.ld)
    if (desc.rows - 1) * steps[0] + (desc.cols - 1) * steps[1] >= flat.size:
        raise ValueError(f"{desc} reaches past A's {flat.size} elements")
    if isinstance(flat, np.ndarray):
        as_strided = np.lib.stride_tricks.as_strided
    else:
        import cupy

        as_strided = cupy.lib.stride_tricks.as_strided
    stored = as_strided(flat, (desc.rows, desc.cols), tuple(step * flat.itemsize for step in steps))
    operand = stored if op == "N" else stored.T  # op(matA) is M x K; op(matB) is K x M
    return operand if layout.sparse_first else operand.T


def breaks_2_4_along_k(memory: Any, layout: Layout) -> bool:
    """Whether some group of four consecutive elements along K (the product's reduction dimension, the only one
    sparse tensor cores prune) of A, read through the layout, holds more than two nonzeros; -0.0 counts as zero."""
    a = read_a(memory, layout)
    bits = 8 * a.itemsize
    magnitude = a.view(np.dtype(f"u{a.itemsize}")) & ((1 << (bits - 1)) - 1)
    M, K = a.shape
    return bool(((magnitude != 0).reshape(M, K // 4, 4).sum(axis=2) > 2).any())


def _layout_text(layout: Layout) -> str:
    desc, op = structured_operand(layout)
    return (f"{'matA' if layout.sparse_first else 'matB'} {desc.rows}x{desc.cols} {desc.order}-major ld {desc.ld}, "
            f"op {op}")


# -- candidates -----------------------------------------------------------------------------------------------------

@register(FAMILY, LIBRARY)
def candidates(problem: Problem, device: Mapping[str, Array]) -> list[Candidate]:
    """Four operand orders, each with its equivalent descriptions as variants, if the library loads here."""
    gemm = sparse24_gemm(problem)
    text = status()
    log_unavailable(LIBRARY, {"cusparselt_direct": text})
    if not text.startswith("available"):
        return []
    operands = functools.cache(functools.partial(sparse24_operands, gemm, problem, device))
    return [Candidate(described[0].name, tuple(functools.partial(_build, layout, operands) for layout in described))
            for described in layouts(gemm.M, gemm.K, gemm.N)]


def _set(lt: CusparseLt, matmul: Opaque, handle: Opaque, attribute: str, value: Any) -> None:
    lt("cusparseLtMatmulDescSetAttribute", handle.ptr, matmul.ptr, _E[attribute], ctypes.byref(value),
       ctypes.sizeof(value))


def _alg_attribute(lt: CusparseLt, handle: Opaque, selection: Opaque, attribute: str) -> int:
    value = ctypes.c_int()
    lt("cusparseLtMatmulAlgGetAttribute", handle.ptr, selection.ptr, _E[attribute], ctypes.byref(value),
       ctypes.sizeof(value))
    return value.value


def _build(layout: Layout, operands: Callable[[], Sparse24Operands]) -> BaselineCall:
    import cupy

    lt = load()
    ops = operands()
    gemm = ops.gemm
    if breaks_2_4_along_k(ops.a, layout):
        raise ValueError(f"A is not 2:4 along K as {_layout_text(layout)} reads it")
    output = ops.new_output()
    owner = Owner()
    stream = cupy.cuda.get_current_stream().ptr
    handle, mat_a, mat_b, mat_d, matmul, selection, plan = (Opaque() for _ in range(7))
    owner.keep(ops, output, handle, mat_a, mat_b, mat_d, matmul, selection, plan)
    lt("cusparseLtInit", handle.ptr)
    owner.descriptor(lt.destroyer("cusparseLtDestroy"), handle.ptr)

    b_memory = cupy.empty((gemm.N, gemm.K), dtype=ops.b.dtype) if layout.b_transposed else ops.b
    value_type = _VALUE_TYPE[gemm.dtype]
    for desc, target, structured in ((layout.mat_a, mat_a, layout.sparse_first),
                                     (layout.mat_b, mat_b, not layout.sparse_first)):
        if structured:
            lt("cusparseLtStructuredDescriptorInit", handle.ptr, target.ptr, desc.rows, desc.cols, desc.ld, _ALIGNMENT,
               value_type, _ORDER[desc.order], _E["CUSPARSELT_SPARSITY_50_PERCENT"])
        else:
            lt("cusparseLtDenseDescriptorInit", handle.ptr, target.ptr, desc.rows, desc.cols, desc.ld, _ALIGNMENT,
               value_type, _ORDER[desc.order])
        owner.descriptor(lt.destroyer("cusparseLtMatDescriptorDestroy"), target.ptr)
    d = layout.mat_d
    lt("cusparseLtDenseDescriptorInit", handle.ptr, mat_d.ptr, d.rows, d.cols, d.ld, _ALIGNMENT,
       _VALUE_TYPE[gemm.out_dtype], _ORDER[d.order])
    owner.descriptor(lt.destroyer("cusparseLtMatDescriptorDestroy"), mat_d.ptr)
    lt("cusparseLtMatmulDescriptorInit", handle.ptr, matmul.ptr, _OP[layout.ops[0]], _OP[layout.ops[1]], mat_a.ptr,
       mat_b.ptr, mat_d.ptr, mat_d.ptr, _E["CUSPARSE_COMPUTE_32F"])

    fused = ["alpha"]
    # Fused only where measured right: with alpha 0.5, a row bias and ReLU fused, cuSPARSELt's D was wrong on the H200
    # (relative error 20.8 in fp16, 0.15 in bf16, session 8), while GELU with a bias at alpha 1 was right; until the
    # other combinations are measured (tests/tools/test_sparse24_baselines.py has them), a bias and an activation
    # are fused at alpha 1 only, and never ReLU. In e4m3 a fused row bias alone was wrong too (relative error 10.2,
    # algorithm 8, D = A B with B column-major, session 14: evals/results/issue15_h200/gpu_tests_baselines_fp8_session14_h200.txt),
    # so e4m3 fuses neither
    if layout.fuses_bias and gemm.alpha == 1.0 and gemm.act != 1 and gemm.dtype != "fp8_e4m3":
        if gemm.act:
            _set(lt, matmul, handle, "CUSPARSELT_MATMUL_ACTIVATION_RELU" if gemm.act == 1
                 else "CUSPARSELT_MATMUL_ACTIVATION_GELU", ctypes.c_int(1))
            fused.append("act")
        if gemm.has_bias:
            # float32 bias, as NVIDIA's cuSPARSELt sample passes it with fp16 operands and fp32 compute
            bias_pointer = ctypes.c_void_p(ops.bias.data.ptr)
            _set(lt, matmul, handle, "CUSPARSELT_MATMUL_BIAS_POINTER", bias_pointer)
            fused.append("bias")
    post = separate_epilogue(ops, fused)

    lt("cusparseLtMatmulAlgSelectionInit", handle.ptr, selection.ptr, matmul.ptr, _E["CUSPARSELT_MATMUL_ALG_DEFAULT"])
    if hasattr(lt.cdll, "cusparseLtMatmulAlgSelectionDestroy"):
        owner.descriptor(lt.destroyer("cusparseLtMatmulAlgSelectionDestroy"), selection.ptr)
    lt("cusparseLtMatmulPlanInit", handle.ptr, plan.ptr, matmul.ptr, selection.ptr)
    owner.descriptor(lt.destroyer("cusparseLtMatmulPlanDestroy"), plan.ptr)

    # One-time preparation: the library's own 2:4 check and the compression of A (in the plan's layout). The flag
    # starts at 0, as in NVIDIA's sample (a fresh cudaMalloc): the library is not documented to write it for a valid
    # A, and started at 1 it rejected every description of a valid A on the H200 (2026-12-01).
    valid = cupy.zeros(1, dtype=cupy.int32)
    lt("cusparseLtSpMMAPruneCheck", handle.ptr, matmul.ptr, ops.a.data.ptr, valid.data.ptr, stream)
    if int(valid.get()[0]) != 0:
        raise ValueError(f"cusparseLtSpMMAPruneCheck rejects A described as {_layout_text(layout)}, although A is "
                         "2:4 along K read that way: the library prunes this description along another dimension")
    sizes = (ctypes.c_size_t(), ctypes.c_size_t())
    lt("cusparseLtSpMMACompressedSize", handle.ptr, plan.ptr, ctypes.byref(sizes[0]), ctypes.byref(sizes[1]))
    compressed = cupy.empty(max(sizes[0].value, 1), dtype=cupy.uint8)
    scratch = cupy.empty(max(sizes[1].value, 1), dtype=cupy.uint8)
    lt("cusparseLtSpMMACompress", handle.ptr, plan.ptr, ops.a.data.ptr, compressed.data.ptr, scratch.data.ptr, stream)

    scalars = (ctypes.c_float * 2)(gemm.alpha, 0.0)  # host alpha, beta for the fp32 compute type
    streams = (ctypes.c_void_p * 1)(stream)
    workspace = _workspace(lt, handle, plan)
    transpose_b, transposed_by = byte_transposer(ops.b, b_memory) if layout.b_transposed else (None, "")
    if transpose_b:
        transpose_b()
    first, second = (compressed.data.ptr, b_memory.data.ptr)
    if not layout.sparse_first:
        first, second = second, first

    def matmul_args() -> tuple[Any, ...]:
        return (handle.ptr, plan.ptr, ctypes.addressof(scalars), first, second, ctypes.addressof(scalars) + 4,
                output.data.ptr, output.data.ptr, workspace.data.ptr, streams, 1)

    lt("cusparseLtMatmulSearch", *matmul_args())
    workspace = max(workspace, _workspace(lt, handle, plan), key=lambda w: w.size)
    alg = _alg_attribute(lt, handle, selection, "CUSPARSELT_MATMUL_ALG_CONFIG_ID")
    split_k = _alg_attribute(lt, handle, selection, "CUSPARSELT_MATMUL_SPLIT_K")
    split_mode = _alg_attribute(lt, handle, selection, "CUSPARSELT_MATMUL_SPLIT_K_MODE")
    owner.keep(b_memory, compressed, workspace, scalars, streams, *((ops.bias,) if ops.bias is not None else ()))
    args = matmul_args()

    def launch() -> None:
        streams[0] = cupy.cuda.get_current_stream().ptr
        if transpose_b:
            transpose_b()
        lt("cusparseLtMatmul", *args)
        if post:
            post(output)

    split_text = f"split-K {split_k}" + (f" ({_SPLIT_K_MODES.get(split_mode, split_mode)})" if split_k > 1 else "")
    order_text = ("D = A B, D = C row-major" if layout.sparse_first
                  else "D^T = B^T A^T (A^T structured), D in C's memory column-major")
    b_text = f"transposed to column-major in the call ({transposed_by})" if transpose_b else "row-major as given"
    config = (f"cusparseLtMatmul, {order_text}, B {b_text}, "
              f"op(A)={layout.ops[0]} op(B)={layout.ops[1]}, {gemm.dtype} in, {gemm.out_dtype} out, fp32 compute, "
              f"cusparseLtMatmulSearch: alg id {alg}, {split_text}; "
              f"{epilogue_text(gemm, fused, 'cuSPARSELt')}")
    note = (f"cuSPARSELt {lt.version()}: A 2:4-checked and compressed once ({sizes[0].value} bytes) by "
            f"cusparseLtSpMMACompress, algorithm searched once; neither is in the per-call time")
    return BaselineCall(layout.name, LIBRARY, config, OwnedLaunch(owner, launch), output, note)


def _workspace(lt: CusparseLt, handle: Opaque, plan: Opaque) -> Array:
    import cupy

    size = ctypes.c_size_t()
    lt("cusparseLtMatmulGetWorkspace", handle.ptr, plan.ptr, ctypes.byref(size))
    return cupy.empty(max(size.value, 1), dtype=cupy.uint8)


# -- PyTorch's front end --------------------------------------------------------------------------------------------

@register(FAMILY, TORCH_LIBRARY)
def torch_candidates(problem: Problem, device: Mapping[str, Array]) -> list[Candidate]:
    """torch._cslt_sparse_mm with B as given and with B transposed in the call. Each is first replayed from a CUDA
    graph (torch builds descriptors and a cuSPARSELt plan inside every eager call: host time, 50-200 us by the
    account of torch's plan-cache change #179642, that a timed call would carry), then eager where capture fails; each first with the algorithm id and split-K its search
    found, then (older torch without split-K arguments) with the algorithm id alone."""
    gemm = sparse24_gemm(problem)
    torch, text = torch_cslt_status()
    log_unavailable(TORCH_LIBRARY, {"torch_cslt": text})
    if torch is None:
        return []
    operands = functools.cache(functools.partial(sparse24_operands, gemm, problem, device))
    return [Candidate(f"torch_cslt_b{'col' if b_transposed else 'row'}",
                      tuple(functools.partial(_build_torch, torch, operands, b_transposed, split, graphed)
                            for graphed in (True, False) for split in (True, False)))
            for b_transposed in (False, True)]


def _search(torch: ModuleType, compressed: Any, dense: Any, kwargs: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The algorithm id and the split-K arguments of torch._cslt_sparse_mm that torch's cuSPARSELt search found:
    the full search where torch has it (its third value is a split-K mode, or in older torch a one-kernel flag),
    else the algorithm id alone, else the default."""
    cusparselt = getattr(torch._C, "_cusparselt", None)
    if cusparselt is not None and hasattr(cusparselt, "mm_search"):
        alg, split_k, mode, _ = cusparselt.mm_search(compressed, dense, kwargs["bias"], kwargs["alpha"],
                                                     kwargs["out_dtype"], False)
        return int(alg), {"split_k": int(split_k),
                          ("split_k_one_kernel" if isinstance(mode, bool) else "split_k_mode"): mode}
    if hasattr(torch, "_cslt_sparse_mm_search"):
        return int(torch._cslt_sparse_mm_search(compressed, dense, **kwargs)), {}
    return 0, {}


def _build_torch(torch: ModuleType, operands: Callable[[], Sparse24Operands], b_transposed: bool,
                 with_split: bool, graphed: bool) -> BaselineCall:
    """Everything but the product is done here, once, on the harness's stream: views, compression, search, the
    eager warm-up and the capture. The timed call replays the graph (B's transposition where asked, the product,
    the copy into C) or, eager, makes the same torch calls; then the epilogue steps torch does not fuse."""
    ops = operands()
    gemm = ops.gemm
    output = ops.new_output()
    a_t, b_t, c_t = (torch_tensor(torch, x, n) for x, n in ((ops.a, gemm.dtype), (ops.b, gemm.dtype),
                                                              (output, gemm.out_dtype)))
    bt = torch.empty((gemm.N, gemm.K), dtype=b_t.dtype, device=b_t.device)
    dense = bt.t() if b_transposed else b_t
    bias_t = torch_tensor(torch, ops.bias_as(gemm.out_dtype), gemm.out_dtype) if gemm.has_bias else None
    # alpha is fused only into eager calls, as a device tensor (torch refuses a host alpha: "Expected all tensors to
    # be on the same device", H200); captured with one, the call failed the capture and left the stream unusable
    # (H200, session 8), so a replayed graph leaves alpha, and the bias that must follow it, to the separate pass
    fused = ("alpha", "bias") if gemm.alpha == 1.0 or not graphed else ()
    kwargs = {"bias": bias_t if "bias" in fused else None,
              "alpha": (torch.tensor([gemm.alpha], dtype=torch.float32, device=b_t.device)
                        if gemm.alpha != 1.0 and "alpha" in fused else None),
              # out_dtype is accepted for 8-bit inputs only
              "out_dtype": ({"fp16": torch.float16, "bf16": torch.bfloat16}[gemm.out_dtype]
                            if gemm.dtype == "fp8_e4m3" else None)}
    owner = Owner()
    prepared: dict[str, Any] = {}

    def product() -> None:
        if b_transposed:
            bt.copy_(b_t.t())
        c_t.copy_(torch._cslt_sparse_mm(prepared["compressed"], dense, **kwargs, **prepared["extra"]))

    def prepare() -> None:
        prepared["compressed"] = torch._cslt_compress(a_t)
        if b_transposed:
            bt.copy_(b_t.t())
        alg, split = _search(torch, prepared["compressed"], dense, kwargs)
        prepared["extra"] = {"alg_id": alg, **(split if with_split else {})}
        product()  # eager once: arguments checked and lazy initialisation done before any capture
        if graphed:
            prepared["graph"] = torch.cuda.CUDAGraph()
            # relaxed: the plan building inside the captured call may allocate, which global mode refuses
            with torch.cuda.graph(prepared["graph"], capture_error_mode="relaxed"):
                product()

    torch_run(torch, owner, prepare)()
    replay = prepared["graph"].replay if graphed else product
    post = separate_epilogue(ops, fused)
    owner.keep(ops, a_t, b_t, c_t, bt, bias_t, kwargs, prepared)

    def compute() -> None:
        replay()
        if post:
            post(output)

    extra = prepared["extra"]
    split_text = ", ".join(f"{key} {value}" for key, value in extra.items() if key != "alg_id") or "split-K not set"
    name = f"torch_cslt_b{'col' if b_transposed else 'row'}"
    b_text = "transposed in the call" if b_transposed else "row-major as given"
    how = ("replayed from a CUDA graph captured once (the kernels only: no per-call plan building)" if graphed
           else "eager (torch builds descriptors and a cuSPARSELt plan inside every call: that host time is in "
                "the per-call time)")
    config = (f"torch._cslt_sparse_mm (cuSPARSELt), {how}, B {b_text}, "
              f"{gemm.dtype} in, {gemm.out_dtype} out, searched alg id {extra['alg_id']}, {split_text}, result copied "
              f"into C; {epilogue_text(gemm, fused, 'cuSPARSELt')}")
    note = ("A compressed once by torch._cslt_compress, the algorithm searched once"
            + (", the call captured once in a CUDA graph" if graphed else "") + "; none of it is in the per-call time")
    return BaselineCall(name, TORCH_LIBRARY, config, torch_run(torch, owner, compute), output, note)
