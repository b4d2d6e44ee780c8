"""B^T for the fp8 baselines whose products take B only K-major (cuBLASLt's e4m3 kernels through torch._scaled_mm,
cuSPARSELt's column-major B through its C API): the e4m3 2:4 sequence's own transposition kernel
(sp24w_transpose_b), so that those products and the sequence pay the same for it. torch's copy_ of the transposed
view and CuPy's copyto move bytes one at a time: 397 and 361 us for 8192^2 bytes on the H200, against 39 us for the
kernel and 36 us for a plain copy of the same bytes (evals/results/issue15_h200/fp8_transpose_share_session14_h200.txt),
35-43% of those baselines' 8192^3 times. Compiled once per device and process; where it cannot be (no sm_90a device),
CuPy's copy, with a warning. (torch's cuSPARSELt route keeps torch's copy_ inside its captured graph.)"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)

KERNEL = "sp24_wgmma_sp_fp8"
ENTRY = "sp24w_transpose_b"


@functools.cache
def _transposition(device: int) -> tuple[Any, Any] | None:
    """(CuPy function, its launch entry) on `device`, or None where the sequence does not compile for it. The
    transposition does not depend on the product's parameters: each takes its first allowed value."""
    import cupy

    from sparseditto.knowledge_base.library import get_kernel
    from sparseditto.tools.compiler import compile_source
    from sparseditto.tools.dtypes import DTYPES

    kernel = get_kernel(KERNEL)
    candidate = kernel.instantiate({name: values[0] for name, values in kernel.parameters.items()})
    arch = candidate.compile_arch(f"sm_{cupy.cuda.Device(device).compute_capability}")
    result = compile_source(candidate.source, arch, [*candidate.defines(DTYPES["fp8_e4m3"].code),
                                                     *candidate.compile_options])
    if not result.ok:
        log.warning("byte_transposition_unavailable", arch=arch, fallback="cupy.copyto", log=result.log[-300:])
        return None
    module = cupy.cuda.function.Module()
    module.load(result.cubin)
    return module.get_function(ENTRY), next(k for k in kernel.kernels if k.entry == ENTRY)


def byte_transposer(src: Any, dst: Any) -> tuple[Callable[[], None], str]:
    """A call that writes dst (N x K) = src^T (src K x N, row-major) on the current CuPy stream, and how it does it
    (for a baseline's configuration text). The kernel takes 1-byte elements; others go by CuPy's copy."""
    import cupy

    from sparseditto.tools.expr import evaluate

    copy = (lambda: cupy.copyto(dst, src.T)), "CuPy copyto"
    if src.dtype.itemsize != 1:
        return copy
    compiled = _transposition(cupy.cuda.Device().id)
    # the kernel reads B's rows as 16-byte vectors where N allows (as the sequence does with the harness's arrays)
    if compiled is None or src.data.ptr % 16 or dst.data.ptr % 16:
        return copy
    function, entry = compiled
    K, N = src.shape
    symbols = {"N": N, "K": K}
    grid = tuple(evaluate(e, symbols) for e in entry.grid)
    block = tuple(evaluate(e, symbols) for e in entry.block)
    values = {"B": src, "Bt": dst, "N": cupy.int32(N), "K": cupy.int32(K)}
    args = tuple(values[name] for name in entry.args)
    return (lambda: function(grid, block, args)), f"{KERNEL}'s {ENTRY}"
