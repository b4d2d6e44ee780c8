"""y = A x with A in CSR: the bandwidth-bound family."""

from __future__ import annotations

from typing import Any

import numpy as np

from sparseditto.spec import Spec
from sparseditto.tools.families.base import VALUE_BYTES, Problem, to_float64, to_storage
from sparseditto.tools.families.csr import TOLERANCE, csr_bytes, csr_float64, csr_inputs, make_matrix, spec_matrix_shape


class CsrSpmv:
    name = "csr_spmv"
    operation = "spmv"

    def symbols(self, spec: Spec) -> dict[str, int]:
        M, K, nnz = spec_matrix_shape(spec)
        return {"M": M, "K": K, "N": 1, "nnz": nnz}

    def make_problem(self, spec: Spec, seed: int, shape: dict[str, int] | None = None) -> Problem:
        rng = np.random.default_rng(seed)
        s = shape or self.symbols(spec)
        M, K = s["M"], s["K"]
        mat = make_matrix(spec, rng, M, K)
        inputs = csr_inputs(mat, spec.dtype)
        inputs["x"] = to_storage(rng.uniform(-1.0, 1.0, size=K).astype(np.float32), spec.dtype)
        return Problem(
            dtype=spec.dtype,
            symbols={"M": M, "K": K, "N": 1, "nnz": mat.nnz},
            inputs=inputs,
            output_name="y",
            output_shape=(M,),
        )

    def reference(self, problem: Problem) -> np.ndarray:
        s = problem.symbols
        A = csr_float64(problem.inputs, problem.dtype, (s["M"], s["K"]))
        return A @ to_float64(problem.inputs["x"], problem.dtype)

    def tolerance(self, dtype: str) -> float:
        return TOLERANCE[dtype]

    def flops(self, symbols: dict[str, int]) -> float:
        return 2.0 * symbols["nnz"]

    def min_bytes(self, symbols: dict[str, int], dtype: str) -> float:
        return csr_bytes(symbols["M"], symbols["nnz"], dtype) + (symbols["K"] + symbols["M"]) * VALUE_BYTES[dtype]

    def held_out_shapes(self, spec: Spec) -> list[dict[str, int]]:
        M, K, _ = spec_matrix_shape(spec)
        if spec.pattern.kind == "matrix_file":
            return [{"M": M, "K": K}]
        return [{"M": max(1, M // 3 + 7), "K": max(1, K // 2 + 5)}]

    def baselines(self, device_inputs: dict[str, Any], problem: Problem) -> list:
        from sparseditto.tools.baselines import spmv_baselines

        s = problem.symbols
        d = device_inputs
        return spmv_baselines(d["rowptr"], d["colind"], d["values"], d["x"], s["M"], s["K"], problem.dtype)
