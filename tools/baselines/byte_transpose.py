"""B^T for the fp8 baselines, whose products take B only K-major (cuBLASLt's e4m3 kernels, cuSPARSELt's
column-major B): the e4m3 2:4 sequence's own transposition kernel (sp24w_transpose_b), so that every fp8 product
pays the same for it. torch's copy_ of the transposed view and CuPy's copyto move bytes one at a time: 397 and 361 us
for 8192^2 bytes on the H200, against 39 us for the kernel and 36 us for a plain copy of the same bytes
(evals/results/issue15_h200/fp8_transpose_share_session14_h200.txt); left to them, the baselines' per-call times were
mostly the transposition. Compiled once per process; where it cannot be (no sm_90a device), CuPy's copy."""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

KERNEL = "sp24_wgmma_sp_fp8"


@functools.cache
def _transposition() -> tuple[Any, Any] | None:
    """(CuPy function, its launch entry), or None where the sequence does not compile for this device. The
    transposition does not depend on the product's parameters: each takes its first allowed value."""
    import cupy

    from sparseditto.knowledge_base.library import get_kernel
    from sparseditto.tools.compiler import compile_source
    from sparseditto.tools.dtypes import DTYPES

    kernel = get_kernel(KERNEL)
    candidate = kernel.instantiate({name: values[0] for name, values in kernel.parameters.items()})
    arch = candidate.compile_arch(f"sm_{cupy.cuda.Device().compute_capability}")
    result = compile_source(candidate.source, arch, [*candidate.defines(DTYPES["fp8_e4m3"].code),
                                                     *candidate.compile_options])
    if not result.ok:
        log.info("byte_transposition_unavailable", arch=arch, log=result.log[-500:])
        return None
    path = Path(tempfile.mkdtemp(prefix="sparseditto_transpose_")) / "transpose.cubin"
    path.write_bytes(result.cubin)
    entry = next(k for k in kernel.kernels if k.entry == "sp24w_transpose_b")
    return cupy.RawModule(path=str(path)).get_function(entry.entry), entry


def byte_transposer(src: Any, dst: Any) -> Callable[[], None]:
    """A call that writes dst (N x K bytes) = src^T (src K x N bytes, row-major) on the current CuPy stream."""
    import cupy

    from sparseditto.tools.expr import evaluate

    K, N = src.shape
    compiled = _transposition()
    if compiled is None:
        return lambda: cupy.copyto(dst, src.T)
    function, entry = compiled
    symbols = {"N": N, "K": K}
    grid = tuple(evaluate(e, symbols) for e in entry.grid)
    block = tuple(evaluate(e, symbols) for e in entry.block)
    args = (src, dst, cupy.int32(N), cupy.int32(K))
    return lambda: function(grid, block, args)


def transposition_text() -> str:
    """How B^T is made, for a baseline's configuration text."""
    return f"{KERNEL}'s sp24w_transpose_b" if _transposition() is not None else "CuPy copyto"
