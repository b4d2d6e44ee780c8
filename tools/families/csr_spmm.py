"""C = A B with A in CSR and B, C dense row-major: the family of GNN aggregation and pruned layers."""

from __future__ import annotations

from typing import Any

import numpy as np

from sparseditto.spec import Spec
from sparseditto.tools.families.base import VALUE_BYTES, Problem, to_float64, to_storage
from sparseditto.tools.families.csr import TOLERANCE, csr_bytes, csr_float64, csr_inputs, make_matrix, spec_matrix_shape


class CsrSpmm:
    name = "csr_spmm"
    operation = "spmm"

    def symbols(self, spec: Spec) -> dict[str, int]:
        M, K, nnz = spec_matrix_shape(spec)
        return {"M": M, "K": K, "N": spec.N, "nnz": nnz}

    def make_problem(self, spec: Spec, seed: int, shape: dict[str, int] | None = None) -> Problem:
        rng = np.random.default_rng(seed)
        s = shape or self.symbols(spec)
        M, K, N = s["M"], s["K"], s["N"]
        mat = make_matrix(spec, rng, M, K)
        inputs = csr_inputs(mat, spec.dtype)
        inputs["B"] = to_storage(rng.uniform(-1.0, 1.0, size=(K, N)).astype(np.float32), spec.dtype)
        return Problem(
            dtype=spec.dtype,
            symbols={"M": M, "K": K, "N": N, "nnz": mat.nnz},
            inputs=inputs,
            output_name="C",
            output_shape=(M, N),
        )

    def reference(self, problem: Problem) -> np.ndarray:
        s = problem.symbols
        A = csr_float64(problem.inputs, problem.dtype, (s["M"], s["K"]))
        return np.asarray(A @ to_float64(problem.inputs["B"], problem.dtype))

    def tolerance(self, dtype: str) -> float:
        return TOLERANCE[dtype]

    def flops(self, symbols: dict[str, int]) -> float:
        return 2.0 * symbols["nnz"] * symbols["N"]

    def min_bytes(self, symbols: dict[str, int], dtype: str) -> float:
        dense = (symbols["K"] + symbols["M"]) * symbols["N"] * VALUE_BYTES[dtype]
        return csr_bytes(symbols["M"], symbols["nnz"], dtype) + dense

    def held_out_shapes(self, spec: Spec) -> list[dict[str, int]]:
        M, K, _ = spec_matrix_shape(spec)
        N = spec.N
        if spec.pattern.kind == "matrix_file":
            return [{"M": M, "K": K, "N": max(1, N - 3)}]
        return [{"M": max(1, M // 2 + 3), "K": max(1, K // 2 + 5), "N": max(1, N - 3 if N > 8 else N + 5)}]

    def baselines(self, device_inputs: dict[str, Any], problem: Problem) -> list:
        from sparseditto.tools.baselines import spmm_baselines

        s = problem.symbols
        d = device_inputs
        return spmm_baselines(d["rowptr"], d["colind"], d["values"], d["B"], s["M"], s["K"], s["N"], problem.dtype)
