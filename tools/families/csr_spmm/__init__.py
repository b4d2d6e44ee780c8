"""C = A B with A in CSR and B, C dense row-major: the family of GNN aggregation and pruned layers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import Field

from sparseditto.tools.families.base import StrategyStart
from sparseditto.tools.families.csr_common import KERNELS_ROOT, CsrFamily, CsrSpecFields
from sparseditto.tools.families.csr_spmm.bsr import bsr_blocks
from sparseditto.tools.families.csr_spmm.preparations import row_group_union

# rows sharing each column of a group of 8 from which tensor-core row groups lead: on the H200 they beat row split
# on a banded fp16 5% matrix (2.76 rows per column: 33.4 vs 61.7 us) and lost on uniform ones (1.04-1.19)
SHARED_COLUMNS_FOR_TENSOR_CORES = 2.0
# blocks at least this full (nonzeros over stored values) make BSR's padding cheaper than CSR's indices
DENSE_BLOCKS_FOR_BSR = 0.6


class CsrSpmmSpec(CsrSpecFields):
    family: Literal["csr_spmm"] = "csr_spmm"
    operation: Literal["spmm"] = "spmm"
    N: Annotated[int, Field(ge=1, le=1 << 20)] = 1


class CsrSpmm(CsrFamily):
    name = "csr_spmm"
    operation = "spmm"
    spec_model = CsrSpmmSpec
    kernels_dir = KERNELS_ROOT / "csr_spmm"
    preparations = {"row_group_union": row_group_union, "bsr_blocks": bsr_blocks}
    target_speedup = 3.0
    example_spec = {"name": "small_spmm", "operation": "spmm", "pattern": {"distribution": "uniform", "density": 0.02},
                    "M": 1024, "K": 1024, "N": 64, "dtype": "fp32", "budget": {"iterations": 4}}
    dense_name = "B"
    output_name = "C"

    def dense_columns(self, spec: CsrSpmmSpec) -> int:
        return spec.N

    def operand_features(self, spec: CsrSpmmSpec) -> dict[str, float]:
        return {"N": float(spec.N)}

    def strategies(self, spec: CsrSpmmSpec, features: Mapping[str, float]) -> list[StrategyStart]:
        """Row split first; tensor-core row groups first when the rows of a group share columns; dense blocks
        (16-bit values) lead with BSR on tensor cores."""
        overlap = features["group_overlap"]
        # widest column tiling whose last warp still has columns (the kernel's constraint, checked again by the planner)
        wn = max(w for w in (1, 2, 4) if w == 1 or 16 * 4 * (w - 1) < spec.N)
        rowsplit = StrategyStart(
            "spmm_csr_rowsplit",
            {"VW": 4 if spec.dtype == "fp32" else 8, "WARPS": 4, "UNROLL": 8 if spec.dtype == "fp32" else 4},
            "warp per row with 16-byte gathers of B rows: robust at any density")
        smem_tile = StrategyStart(
            "spmm_csr_smem_tile", {"LPR": 8, "WARPS": 32, "RPG": 1, "KC": 512, "UNROLL": 4},
            "a column slice of B in shared memory, reused by many rows: far less L2 traffic than row split, "
            "though latency-bound and slower on the uniform matrices measured")
        tensor = StrategyStart(
            "spmm_csr_tc_rowgroup", {"MT": 4, "WN": wn, "WK": 1, "KB": 2},
            f"16-bit values on tensor cores over groups of 8 rows, which share columns {overlap:.2f}x on average")
        # the block size whose blocks are fullest (the larger one when within 10%)
        fill, block = max((features.get(f"block_fill_{b}", 0.0) * (1.0 if b == 8 else 0.9), b) for b in (8, 16, 32))
        nt = max(t for t in (16, 32, 64, 128) if (t == 16 or t - 16 < spec.N) and (t // 16) * (block // 8) <= 24)
        bsr = StrategyStart(
            "spmm_bsr_tc", {"BR": block, "BC": block, "NT": nt, "WARPS": 4},
            f"BSR {block}x{block} on tensor cores: blocks {features.get(f'block_fill_{block}', 0.0):.0%} full, "
            "one index per block instead of one per nonzero")
        if fill >= DENSE_BLOCKS_FOR_BSR:
            return [bsr, tensor, rowsplit, smem_tile]
        if overlap >= SHARED_COLUMNS_FOR_TENSOR_CORES:
            return [tensor, rowsplit, smem_tile, bsr]
        return [rowsplit, smem_tile, tensor, bsr]


FAMILY = CsrSpmm()
