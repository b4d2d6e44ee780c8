"""Dense cuBLAS/cuBLASLt on the decompressed 2:4 matrix: what a 2:4 kernel must beat by ignoring the sparsity.

The family computes C = act(alpha * A B + bias[:, None]) with A (M x K) 2:4 sparse, B (K x N) and C (M x N)
row-major. A is decompressed once (the family's `decompress`) and shared by every configuration; B and C are the
harness's arrays. Routes: cupy.matmul (cublasGemmEx; fp16 only, CuPy has no bf16/fp8 product), torch.mm, torch's
cuBLASLt bias/activation epilogue on C^T = B^T A^T (the order in which a per-row bias of C is cuBLASLt's per-column
bias), and fp8 e4m3 through torch._scaled_mm (cuBLASLt; its fp8 kernels take only a column-major B, so B is
transposed inside every call, by the 2:4 sequence's own transposition: byte_transpose). Whatever a route does not
fuse runs as one CuPy elementwise pass after the product, inside the timed call. This module also holds what the
cuSPARSELt module shares with it: the problem's description, its device operands and that elementwise epilogue.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import structlog

from sparseditto.tools.baselines import register
from sparseditto.tools.baselines.byte_transpose import byte_transposer
from sparseditto.tools.baselines.common import (
    Array, BaselineCall, Candidate, OwnedLaunch, Owner, candidate, torch_module, torch_run, torch_view,
)
from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.dtypes import to_float64, to_storage

if TYPE_CHECKING:
    from sparseditto.tools.families.base import Problem

log = structlog.get_logger(__name__)

FAMILY = "sparse24_gemm"
LIBRARY = "cublas"
INPUT_DTYPES = ("fp16", "bf16", "fp8_e4m3")
OUTPUT_DTYPES = ("fp16", "bf16")
ACTIVATIONS = {0: "none", 1: "relu", 2: "gelu (tanh form)"}

_NOTE = "A decompressed once to a dense (M, K) array (the family's decompress); later changes to A are not seen"


@dataclass(frozen=True)
class Sparse24Gemm:
    """One instance as the baselines see it: C (M x N) = act(alpha * A B + bias[:, None]), fp32 accumulation."""

    M: int
    K: int
    N: int
    dtype: str  # of A and B
    out_dtype: str  # of C (and of the bias the libraries take)
    act: int
    has_bias: bool
    alpha: float

    @property
    def epilogue(self) -> tuple[str, ...]:
        """The epilogue steps the instance has, in the order they apply."""
        return tuple(step for step, present in (("alpha", self.alpha != 1.0), ("bias", self.has_bias),
                                                ("act", self.act != 0)) if present)


def sparse24_gemm(problem: Problem) -> Sparse24Gemm:
    """The instance read from the problem: symbols M, K, N, `has_bias` and `act` (0 none, 1 relu, 2 gelu; absent
    means 0), scalar `alpha` (absent means 1), inputs A_values, A_meta, B (and bias), output C. Anything else is
    refused: a baseline that silently computes another product would make every speedup wrong."""
    if list(problem.outputs) != ["C"]:
        raise ValueError(f"not a 2:4 GEMM: outputs {list(problem.outputs)}, expected ['C']")
    if problem.dtype not in INPUT_DTYPES:
        raise ValueError(f"no 2:4 GEMM baseline for dtype {problem.dtype!r}; expected one of {INPUT_DTYPES}")
    out_dtype = problem.outputs["C"].dtype
    if out_dtype not in OUTPUT_DTYPES:
        raise ValueError(f"C must be one of {OUTPUT_DTYPES}, got {out_dtype!r}")
    symbols = problem.symbols
    M, K, N = (int(symbols[s]) for s in ("M", "K", "N"))
    if K % 4:
        raise ValueError(f"K = {K} is not a multiple of 4, so A cannot be 2:4 along K")
    act = int(symbols.get("act", 0))
    if act not in ACTIVATIONS:
        raise ValueError(f"act must be one of {sorted(ACTIVATIONS)} ({ACTIVATIONS}), got {act}")
    has_bias = bool(symbols.get("has_bias", "bias" in problem.inputs))
    needed = ("A_values", "A_meta", "B", *(("bias",) if has_bias else ()))
    missing = [name for name in needed if name not in problem.inputs]
    if missing:
        raise ValueError(f"2:4 GEMM inputs missing: {missing}")
    return Sparse24Gemm(M, K, N, problem.dtype, out_dtype, act, has_bias, float(problem.scalars.get("alpha", 1.0)))


def _host(array: Any) -> np.ndarray:
    """A host copy of a CuPy array, or the NumPy array itself."""
    return array.get() if hasattr(array, "get") else np.asarray(array)


def dense_a(gemm: Sparse24Gemm, problem: Problem, device: Mapping[str, Any]) -> np.ndarray:
    """A as a dense (M, K) array in its storage type, from the compressed values and metadata the harness holds.

    The values go to `decompress` as float64, read as the problem's input dtype says (not guessed from storage)."""
    from sparseditto.tools.families.sparse24_gemm.compression import decompress

    values = to_float64(_host(device["A_values"]), problem.input_dtypes.get("A_values", gemm.dtype))
    return to_storage(decompress(values, _host(device["A_meta"]), gemm.M, gemm.K), gemm.dtype)


@dataclass(frozen=True)
class Sparse24Operands:
    """The device operands every baseline of the family takes: dense A and B in storage types (bf16 as uint16 bits,
    fp8 as uint8), the bias as float32 (M,) or None."""

    gemm: Sparse24Gemm
    a: Array
    b: Array
    bias: Array | None

    def new_output(self) -> Array:
        import cupy

        return cupy.empty((self.gemm.M, self.gemm.N), dtype=dtype_info(self.gemm.out_dtype).storage)

    def bias_as(self, name: str) -> Array:
        """The bias in another value type (what a library's fused epilogue reads), converted once."""
        import cupy

        return cupy.asarray(to_storage(_host(self.bias).astype(np.float64), name))


def sparse24_operands(gemm: Sparse24Gemm, problem: Problem, device: Mapping[str, Array]) -> Sparse24Operands:
    """Dense A decompressed and uploaded once; B used in place (checked, never copied: a copy would detach the
    baselines from the harness's array); the bias converted to float32 once."""
    import cupy

    b = device["B"]
    storage = np.dtype(dtype_info(gemm.dtype).storage)
    if b.dtype != storage or b.shape != (gemm.K, gemm.N) or not b.flags.c_contiguous:
        raise ValueError(f"B must be C-contiguous {storage} of shape {(gemm.K, gemm.N)}, got {b.dtype} {b.shape}")
    bias = None
    if gemm.has_bias:
        bias64 = to_float64(_host(device["bias"]), problem.input_dtypes.get("bias", gemm.out_dtype)).reshape(-1)
        if bias64.shape != (gemm.M,):
            raise ValueError(f"bias must have M = {gemm.M} elements, got {bias64.size}")
        bias = cupy.asarray(bias64.astype(np.float32))
    return Sparse24Operands(gemm, cupy.asarray(dense_a(gemm, problem, device)), b, bias)


# -- the epilogue as one elementwise pass -------------------------------------------------------------------------

_LOAD = {"fp16": "float x = (float)c;", "bf16": "float x = __uint_as_float(((unsigned int)c) << 16);"}
_STORE = {"fp16": "c = (float16)x;", "bf16": "c = sd_float_to_bf16(x);"}
_KERNEL_TYPE = {"fp16": "float16", "bf16": "uint16"}
_ACT_CODE = {1: "x = fmaxf(x, 0.0f);",
             2: "x = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));"}
_BF16_PREAMBLE = """
__device__ unsigned short sd_float_to_bf16(float x) {
    unsigned int u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // NaN stays NaN
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                   // round to nearest even
}
"""


@functools.cache
def _epilogue_kernel(out_dtype: str, steps: tuple[str, ...], act: int) -> Any:
    import cupy

    body = [_LOAD[out_dtype], "x *= alpha;" if "alpha" in steps else "", "x += bias[i / n];" if "bias" in steps else "",
            _ACT_CODE[act] if "act" in steps else "", _STORE[out_dtype]]
    return cupy.ElementwiseKernel(
        "float32 alpha, raw float32 bias, int64 n", f"{_KERNEL_TYPE[out_dtype]} c",
        "\n".join(line for line in body if line),
        name=f"sd_sparse24_epilogue_{out_dtype}_{'_'.join(steps)}_{act}",
        preamble=_BF16_PREAMBLE if out_dtype == "bf16" else "")


def separate_epilogue(operands: Sparse24Operands, fused: Collection[str]) -> Callable[[Array], None] | None:
    """The epilogue steps a route does not fuse, as one in-place pass over C on the current stream (None: nothing
    left). GELU is the tanh form, as in the family and in cuBLASLt's and cuSPARSELt's epilogues."""
    gemm = operands.gemm
    steps = tuple(step for step in gemm.epilogue if step not in fused)
    if not steps:
        return None
    import cupy

    kernel = _epilogue_kernel(gemm.out_dtype, steps, gemm.act)
    bias = operands.bias if operands.bias is not None else cupy.zeros(1, dtype=cupy.float32)
    return functools.partial(kernel, gemm.alpha, bias, gemm.N)


def epilogue_text(gemm: Sparse24Gemm, fused: Collection[str], where: str) -> str:
    """Where each epilogue step runs, for the configuration text: fused in the library, or in the separate pass."""
    names = {"alpha": f"alpha={gemm.alpha:g}", "bias": "bias per row", "act": ACTIVATIONS[gemm.act]}
    inside = [names[s] for s in gemm.epilogue if s in fused]
    after = [names[s] for s in gemm.epilogue if s not in fused]
    if not inside and not after:
        return "no epilogue"
    parts = [f"epilogue fused in {where}: {', '.join(inside)}"] if inside else []
    if after:
        parts.append(f"epilogue in one CuPy elementwise pass after the product, timed with it: {', '.join(after)}")
    return "; ".join(parts)


# -- availability -------------------------------------------------------------------------------------------------

def cupy_status() -> str:
    """'available: ...' when CuPy imports and sees a GPU, else 'unavailable: <reason>'."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # import failure, no driver, no device: all mean "not here"
        return f"unavailable: CuPy has no GPU ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    return f"available: cupy {cupy.__version__}, {count} device(s)" if count else "unavailable: CuPy sees no device"


def torch_status() -> tuple[ModuleType | None, str]:
    """torch (when it imports and sees a GPU) with 'available: ...', or None with the reason it is not usable."""
    torch = torch_module()
    if torch is not None:
        return torch, f"available: torch {torch.__version__}"
    try:
        import torch as imported
    except Exception as exc:  # torch is optional
        return None, f"unavailable: torch does not import ({exc})"
    return None, f"unavailable: torch {imported.__version__} sees no CUDA device"


def route_status(gemm: Sparse24Gemm) -> dict[str, str]:
    """Each dense route that applies to the instance's value type: 'available: ...' or 'unavailable: <reason>'."""
    torch, torch_text = torch_status()
    if gemm.dtype == "fp8_e4m3":
        if torch is None:
            scaled = torch_text
        elif not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            scaled = f"unavailable: torch {torch.__version__} has no torch._scaled_mm"
        elif (capability := torch.cuda.get_device_capability()) < (8, 9):
            scaled = f"unavailable: fp8 products need sm_89 or newer, this GPU is sm_{capability[0]}{capability[1]}"
        else:
            scaled = f"{torch_text}, torch._scaled_mm (cuBLASLt)"
        return {"torch_scaled_mm": scaled}
    routes = {"cupy_matmul": cupy_status() if gemm.dtype == "fp16" else "unavailable: CuPy has no bf16 matrix product",
              "torch_mm": torch_text}
    if gemm.epilogue:
        routes["torch_lt_epilogue"] = torch_text
    return routes


_LOGGED: set[tuple[str, str, str]] = set()


def log_unavailable(library: str, routes: Mapping[str, str]) -> None:
    """Records each unusable route with its reason, once per process (the harness asks for baselines often)."""
    for route, text in routes.items():
        if not text.startswith("available") and (library, route, text) not in _LOGGED:
            _LOGGED.add((library, route, text))
            log.info("baseline_route_unavailable", library=library, route=route, reason=text)


# -- candidates ---------------------------------------------------------------------------------------------------

def torch_tensor(torch: ModuleType, array: Array, name: str) -> Any:
    """A zero-copy torch tensor of the value type `name` over a CuPy storage array."""
    if name == "fp8_e4m3":
        return torch.from_dlpack(array).view(torch.float8_e4m3fn)
    return torch_view(torch, array, bf16=name == "bf16")


@register(FAMILY, LIBRARY)
def candidates(problem: Problem, device: Mapping[str, Array]) -> list[Candidate]:
    """fp16/bf16: cupy.matmul (fp16), torch.mm, and with an epilogue torch's cuBLASLt epilogue on C^T = B^T A^T
    (into C's memory, or computed apart and copied); fp8: torch._scaled_mm on A B and on B^T A^T."""
    gemm = sparse24_gemm(problem)
    routes = route_status(gemm)
    log_unavailable(LIBRARY, routes)
    operands = functools.cache(functools.partial(sparse24_operands, gemm, problem, device))
    usable = {route for route, text in routes.items() if text.startswith("available")}
    torch = torch_module()
    found: list[Candidate] = []
    if "cupy_matmul" in usable:
        found.append(candidate("cublas_dense_cupy_matmul", _build_cupy, operands))
    if "torch_mm" in usable:
        found.append(candidate("cublas_dense_torch_mm", _build_torch_mm, torch, operands))
    if "torch_lt_epilogue" in usable:
        found.extend(candidate(f"cublaslt_dense_torch_epilogue_ct_{how}", _build_torch_epilogue, torch, operands, how)
                     for how in ("out", "copy"))
    if "torch_scaled_mm" in usable:
        found.extend(candidate(f"cublaslt_fp8_scaled_mm_{order}", _build_scaled_mm, torch, operands, order)
                     for order in ("ab", "btat"))
    return found


def _build_cupy(name: str, operands: Callable[[], Sparse24Operands]) -> BaselineCall:
    """cupy.matmul (cublasGemmEx, fp32 compute) into C, then the whole epilogue as one pass."""
    import cupy

    ops = operands()
    output = ops.new_output()
    post = separate_epilogue(ops, ())
    owner = Owner()
    owner.keep(ops, output)

    def launch() -> None:
        cupy.matmul(ops.a, ops.b, out=output)
        if post:
            post(output)

    config = (f"cupy.matmul (cublasGemmEx, fp32 compute), {ops.gemm.dtype}, dense A; "
              f"{epilogue_text(ops.gemm, (), 'cuBLAS')}")
    return BaselineCall(name, LIBRARY, config, OwnedLaunch(owner, launch), output, _NOTE)


def _build_torch_mm(name: str, torch: ModuleType, operands: Callable[[], Sparse24Operands]) -> BaselineCall:
    """torch.mm(A, B, out=C) (cuBLAS as torch configures it), then the whole epilogue as one pass."""
    ops = operands()
    output = ops.new_output()
    a_t, b_t, c_t = (torch_tensor(torch, x, n) for x, n in ((ops.a, ops.gemm.dtype), (ops.b, ops.gemm.dtype),
                                                              (output, ops.gemm.out_dtype)))
    post = separate_epilogue(ops, ())
    owner = Owner()
    owner.keep(ops, a_t, b_t, c_t)

    def compute() -> None:
        torch.mm(a_t, b_t, out=c_t)
        if post:
            post(output)

    config = (f"torch.mm(A, B, out=C), {ops.gemm.dtype}, dense A, torch default matmul precision; "
              f"{epilogue_text(ops.gemm, (), 'cuBLAS')}")
    return BaselineCall(name, LIBRARY, config, torch_run(torch, owner, compute), output, _NOTE)


def _build_torch_epilogue(name: str, torch: ModuleType, operands: Callable[[], Sparse24Operands],
                          how: str) -> BaselineCall:
    """C^T = act(alpha B^T A^T + bias) through torch.addmm / torch._addmm_activation, whose 1-D bias runs along the
    rows of the result's transpose, i.e. along the rows of C; torch hands it to cuBLASLt's bias/ReLU/GELU epilogue
    when its conditions hold. `how`: 'out' writes C's memory as C^T's view, 'copy' copies a fresh C^T into C."""
    import cupy

    ops = operands()
    gemm = ops.gemm
    output = ops.new_output()
    a_t, b_t, c_t = (torch_tensor(torch, x, n) for x, n in ((ops.a, gemm.dtype), (ops.b, gemm.dtype),
                                                              (output, gemm.out_dtype)))
    bias = ops.bias_as(gemm.out_dtype) if gemm.has_bias else cupy.zeros(gemm.M, dtype=output.dtype)
    bias_t = torch_tensor(torch, bias, gemm.out_dtype)
    owner = Owner()
    owner.keep(ops, bias, a_t, b_t, c_t, bias_t)
    if gemm.act:
        product = functools.partial(torch._addmm_activation, bias_t, b_t.t(), a_t.t(), beta=1, alpha=gemm.alpha,
                                    use_gelu=gemm.act == 2)
        call_text = f"torch._addmm_activation(bias, B^T, A^T, use_gelu={gemm.act == 2})"
    else:
        product = functools.partial(torch.addmm, bias_t, b_t.t(), a_t.t(), beta=1, alpha=gemm.alpha)
        call_text = "torch.addmm(bias, B^T, A^T)"
    if how == "out":
        compute = functools.partial(product, out=c_t.t())
    else:
        def compute() -> None:
            c_t.copy_(product().t())
    where = "out=C^T view of C" if how == "out" else "fresh C^T copied into C"
    bias_note = "" if gemm.has_bias else " (zero bias: torch's fused path needs one)"
    config = (f"{call_text} (cuBLASLt epilogue where torch takes it), {where}, {gemm.dtype}, dense A; "
              f"{epilogue_text(gemm, gemm.epilogue, 'cuBLASLt')}{bias_note}")
    return BaselineCall(name, LIBRARY, config, torch_run(torch, owner, compute), output, _NOTE)


def _build_scaled_mm(name: str, torch: ModuleType, operands: Callable[[], Sparse24Operands],
                     order: str) -> BaselineCall:
    """fp8 e4m3 through torch._scaled_mm (cuBLASLt, fp32 accumulation, fp16/bf16 out), alpha as the tensor-wide
    scale. cuBLASLt's fp8 kernels want mat1 row-major and mat2 column-major, so B is transposed into a scratch
    buffer inside every call (B is a per-call input), by the 2:4 sequence's own transposition (byte_transpose).
    'ab': C = A B written into C, bias and activation after; 'btat': C^T = B^T A^T with the bias fused (it runs
    along C^T's columns = C's rows), copied into C."""
    import cupy

    ops = operands()
    gemm = ops.gemm
    output = ops.new_output()
    out_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[gemm.out_dtype]
    a_t, c_t = (torch_tensor(torch, x, n) for x, n in ((ops.a, gemm.dtype), (output, gemm.out_dtype)))
    device = a_t.device
    bt_memory = cupy.empty((gemm.N, gemm.K), dtype=ops.b.dtype)
    transpose_b, transposed_by = byte_transposer(ops.b, bt_memory)
    bt = torch_tensor(torch, bt_memory, gemm.dtype)
    alpha = torch.tensor(gemm.alpha, dtype=torch.float32, device=device)
    one = torch.ones((), dtype=torch.float32, device=device)
    owner = Owner()
    owner.keep(ops, a_t, c_t, bt_memory, bt, alpha, one)
    if order == "ab":
        fused: tuple[str, ...] = ("alpha",)
        post = separate_epilogue(ops, fused)

        def compute() -> None:
            transpose_b()
            torch._scaled_mm(a_t, bt.t(), alpha, one, out_dtype=out_dtype, out=c_t)
            if post:
                post(output)
        call_text = "torch._scaled_mm(A, B^T.t(), out=C)"
    else:
        fused = ("alpha", "bias")
        bias_t = torch_tensor(torch, ops.bias_as(gemm.out_dtype), gemm.out_dtype) if gemm.has_bias else None
        owner.keep(bias_t)
        post = separate_epilogue(ops, fused)

        def compute() -> None:
            transpose_b()
            c_t.copy_(torch._scaled_mm(bt, a_t.t(), one, alpha, bias=bias_t, out_dtype=out_dtype).t())
            if post:
                post(output)
        call_text = "torch._scaled_mm(B^T, A.t(), bias) copied into C"
    config = (f"{call_text} (cuBLASLt fp8, fp32 accumulation), e4m3 in, {gemm.out_dtype} out, B transposed in the "
              f"call ({transposed_by}); {epilogue_text(gemm, fused, 'cuBLASLt')}")
    return BaselineCall(name, LIBRARY, config, torch_run(torch, owner, compute), output, _NOTE)
