"""y = A x with A in CSR: the bandwidth-bound family."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import Field, model_validator

from sparseditto.tools.families.base import StrategyStart
from sparseditto.tools.families.csr_common import KERNELS_ROOT, CsrFamily, CsrSpecFields
from sparseditto.tools.families.csr_spmv.diagonal import diagonals
from sparseditto.tools.families.csr_spmv.preparations import long_row_chunk_ptr
from sparseditto.tools.families.csr_spmv.sell import sell_c_sigma


class CsrSpmvSpec(CsrSpecFields):
    family: Literal["csr_spmv"] = "csr_spmv"
    operation: Literal["spmv"] = "spmv"
    N: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _vector(self) -> "CsrSpmvSpec":
        if self.N != 1:
            raise ValueError("spmv has N = 1; leave N out or use operation 'spmm'")
        return self


def _pow2_at_most(x: float, choices: list[int]) -> int:
    fitting = [c for c in choices if c <= max(x, 1)]
    return max(fitting) if fitting else min(choices)


class CsrSpmv(CsrFamily):
    name = "csr_spmv"
    operation = "spmv"
    spec_model = CsrSpmvSpec
    kernels_dir = KERNELS_ROOT / "csr_spmv"
    preparations = {"long_row_chunk_ptr": long_row_chunk_ptr, "sell_c_sigma": sell_c_sigma,
                    "diagonals": diagonals}
    target_speedup = 1.5
    example_spec = {"name": "small_spmv", "operation": "spmv", "pattern": {"distribution": "uniform", "nnz_per_row": 16},
                    "M": 65536, "K": 65536, "dtype": "fp32", "budget": {"iterations": 4}}
    dense_name = "x"
    output_name = "y"

    def strategies(self, spec: CsrSpmvSpec, features: Mapping[str, float]) -> list[StrategyStart]:
        """Lanes per row from the mean row length (4 nonzeros per 16-byte load); skewed rows lead with the long-row split."""
        skewed = features["row_cv"] > 1.0 or features["row_max"] > 16 * max(features["row_mean"], 1)
        group = _pow2_at_most(features["row_mean"] / 4, [1, 2, 4, 8, 16, 32])
        vector = StrategyStart(
            "spmv_csr_vec4", {"GROUP": group, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0},
            f"rows of similar length (mean {features['row_mean']:.1f}): {group} lanes per row, 4 nonzeros per 16-byte load")
        split = StrategyStart(
            "spmv_csr_split_vec4",
            {"GROUP": min(16, max(1, group)), "UNROLL": 2, "BLOCK": 256, "LONG_ROW": 64, "CHUNK": 4096, "HINT": 1},
            f"skewed rows (max {features['row_max']:.0f}, cv {features['row_cv']:.2f}): long rows cut into warp-sized chunks")
        return [split, vector] if skewed else [vector, split]


FAMILY = CsrSpmv()
