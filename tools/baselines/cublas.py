"""cuBLAS dense GEMM/GEMV on the densified matrix, through CuPy and through PyTorch.

The sparse kernel has to beat simply ignoring the sparsity. The matrix is densified once (refused above
4 GiB) and shared by every configuration. CuPy cannot multiply bf16, so torch is its only dense route.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING

from sparseditto.tools.baselines import register
from sparseditto.tools.baselines.common import (
    Array, BaselineCall, Candidate, OwnedLaunch, Owner, candidate, torch_module, torch_run, torch_view,
)
from sparseditto.tools.baselines.csr import CsrProduct, csr_product, densify

if TYPE_CHECKING:
    from sparseditto.tools.families.base import Problem

LIBRARY = "cublas"

_CONFIG = "dense GEMM/GEMV on the densified matrix (densified once)"
_NOTE = "A densified once to an (M, K) dense array; later changes to A's values are not seen"


@register("csr_spmv", LIBRARY)
@register("csr_spmm", LIBRARY)
def candidates(problem: Problem, device: Mapping[str, Array]) -> list[Candidate]:
    """cupy.matmul (not bf16), cupy.cublas.gemv for an fp32 vector, and torch.mv/torch.mm."""
    product = csr_product(problem, device)
    densified = functools.cache(functools.partial(densify, product))
    kind = "gemv" if product.vector else "gemm"
    found: list[Candidate] = []
    if product.dtype != "bf16":
        name = "cublas_dense_gemv_cupy_matmul" if product.vector else "cublas_dense_gemm_cupy"
        found.append(candidate(name, _build_cupy, product, densified, "matmul"))
    if product.vector and product.dtype == "fp32":
        found.append(candidate("cublas_dense_sgemv_cupy", _build_cupy, product, densified, "gemv"))
    torch = torch_module()
    if torch is not None:
        found.append(candidate(f"cublas_dense_{kind}_torch", _build_torch, torch, product, densified))
    return found


def _build_cupy(name: str, product: CsrProduct, densified: Callable[[], Array], form: str) -> BaselineCall:
    """cupy.matmul (cublasGemmEx) or cupy.cublas.gemv (cublasSgemv, fp32 vectors only)."""
    import cupy
    import cupy.cublas

    dense = densified()
    output = product.new_output()
    owner = Owner()
    owner.keep(dense, product.dense, output)
    if form == "gemv":
        launch = functools.partial(cupy.cublas.gemv, "N", 1.0, dense, product.dense, 0.0, output)
        call_text = "cupy.cublas.gemv (cublasSgemv)"
    else:
        launch = functools.partial(cupy.matmul, dense, product.dense, out=output)
        call_text = "cupy.matmul (cublasGemmEx, fp32 compute)"
    config = f"{_CONFIG}: {call_text}, {dense.dtype}"
    return BaselineCall(name, LIBRARY, config, OwnedLaunch(owner, launch), output, _NOTE)


def _build_torch(name: str, torch: ModuleType, product: CsrProduct, densified: Callable[[], Array]) -> BaselineCall:
    """torch.mv / torch.mm on zero-copy views; the only dense route for bf16, which CuPy cannot multiply."""
    dense = densified()
    output = product.new_output()
    dense_t, operand_t, out_t = (torch_view(torch, array, product.bf16) for array in (dense, product.dense, output))
    owner = Owner()
    owner.keep(dense, dense_t, operand_t, out_t)
    multiply, call_text = (torch.mv, "torch.mv") if product.vector else (torch.mm, "torch.mm")
    compute = functools.partial(multiply, dense_t, operand_t, out=out_t)
    config = f"{_CONFIG}: {call_text}, {product.dtype}, torch default matmul precision"
    return BaselineCall(name, LIBRARY, config, torch_run(torch, owner, compute), output, _NOTE)
