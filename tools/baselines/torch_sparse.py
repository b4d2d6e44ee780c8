"""PyTorch's sparse CSR matmul front end (cuSPARSE inside), with int32 and int64 indices.

torch picks its own cuSPARSE algorithm and buffers, and on the H200 it was the fastest cuSPARSE route
for SpMM, so it is a library of its own here. Its work runs on CuPy's current stream (common.torch_run).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sparseditto.tools.baselines import register
from sparseditto.tools.baselines.common import (
    Array, BaselineCall, Candidate, Owner, torch_module, torch_run, torch_view,
)
from sparseditto.tools.baselines.csr import CsrProduct, csr_product

if TYPE_CHECKING:
    from sparseditto.tools.families.base import Problem

LIBRARY = "torch_sparse"


@register("csr_spmv", LIBRARY)
@register("csr_spmm", LIBRARY)
def candidates(problem: Problem, device: Mapping[str, Array]) -> list[Candidate]:
    """Each index width, and for a vector both torch.mv and torch.mm on x as a (K, 1) matrix (torch's mv
    lacks some dtypes); each written with out= or, where torch refuses that, copied into the output."""
    product = csr_product(problem, device)
    torch = torch_module()
    if torch is None:
        return []
    found: list[Candidate] = []
    for index_bits in (32, 64):
        for form in ("mv", "mm") if product.vector else ("mm",):
            name = (f"torch_csr_spmv_{form}_i{index_bits}" if product.vector
                    else f"torch_csr_spmm_i{index_bits}")
            variants = tuple(functools.partial(_build, name, torch, product, index_bits, form, use_out)
                             for use_out in (True, False))
            found.append(Candidate(name, variants))
    return found


def _torch_csr(torch: ModuleType, product: CsrProduct, index_bits: int) -> tuple[Any, str]:
    """The CSR matrix as a torch sparse tensor over the same value buffer, plus a preparation note."""
    import cupy

    rowptr, colind = product.rowptr, product.colind
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
            torch_view(torch, rowptr), torch_view(torch, colind), torch_view(torch, product.values, product.bf16),
            size=(product.M, product.K), check_invariants=False,
        )
    return matrix, note


def _build(name: str, torch: ModuleType, product: CsrProduct, index_bits: int, form: str,
           use_out: bool) -> BaselineCall:
    owner = Owner()
    matrix, note = _torch_csr(torch, product, index_bits)
    output = product.new_output()
    dense_t = torch_view(torch, product.dense, product.bf16)
    out_t = torch_view(torch, output, product.bf16)
    owner.keep(matrix, dense_t, out_t)
    if not product.vector:
        call_text = "torch.mm(A_csr, B)"
    elif form == "mm":
        dense_t, out_t = dense_t.view(product.K, 1), out_t.view(product.M, 1)
        call_text = "torch.mm(A_csr, x[:, None])"
    else:
        call_text = "torch.mv(A_csr, x)"
    multiply = torch.mv if form == "mv" else torch.mm
    if use_out:
        compute = functools.partial(multiply, matrix, dense_t, out=out_t)
    else:
        def compute() -> None:
            out_t.copy_(multiply(matrix, dense_t))
    result_text = "out= into the output" if use_out else "result copied into the output"
    config = (f"PyTorch sparse CSR matmul (cuSPARSE): {call_text}, int{index_bits} indices, "
              f"{product.dtype}, {result_text}")
    return BaselineCall(name, LIBRARY, config, torch_run(torch, owner, compute), output, note)
