"""C = A B with A in CSR and B, C dense row-major: the family of GNN aggregation and pruned layers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Literal

from pydantic import Field

from sparseditto.tools.families.base import StrategyStart
from sparseditto.tools.families.csr_common import KERNELS_ROOT, CsrFamily, CsrSpecFields
from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.families.csr_spmm.bsr import bsr_blocks
from sparseditto.tools.expr import evaluate
from sparseditto.tools.families.csr_spmm.cost import (
    LONG_ROW_START, group_overlap, longest_union, predicted_us, rowgroup_tile_bytes,
)
from sparseditto.tools.families.csr_spmm.preparations import row_group_union
from sparseditto.tools.families.csr_spmv.preparations import long_row_chunk_ptr
from sparseditto.tools.structure import SPMM_LONG_ROW


class CsrSpmmSpec(CsrSpecFields):
    family: Literal["csr_spmm"] = "csr_spmm"
    operation: Literal["spmm"] = "spmm"
    N: Annotated[int, Field(ge=1, le=1 << 20)] = 1


# the largest estimated shared memory a block of the row groups' start may take (on CUDA or tensor cores) for the
# planner to offer it: it must fit in the 227 KB an SM gives a block, and the estimate may fall short of the longest
# group (a web graph's row of 3,000 nonzeros gives a union of about 19,000 columns)
ROWGROUP_TILE_LIMIT = 160 * 1024


def start_shared_bytes(kernel: str, start: Mapping[str, int], features: Mapping[str, float]) -> int:
    """A start's shared memory a block, by its kernel's own `shared_bytes` with the longest group's union estimated
    (the preparation's max_union is known only once it has run)."""
    from sparseditto.knowledge_base.library import get_kernel  # the library imports the families

    env = {**start, "max_union": int(longest_union(features, start.get("ROWS", 8)))}
    return max(evaluate(launch.shared_bytes, env) for launch in get_kernel(kernel).kernels)


def rowsplit_lanes(N: int, vw: int) -> int:
    """The fewest lanes per row whose VW-wide loads cover N columns (at most a warp): every lane busy, 16-byte loads."""
    return next((lanes for lanes in (4, 8, 16) if lanes * vw >= N), 32)


def rowgroup_lanes_and_slabs(N: int, vw: int) -> tuple[int, int]:
    """Row groups' start: row split's lanes (the fewest whose loads cover N, so that narrow N leaves subsets to share
    out a group's union), and past 32 lanes up to 4 column slabs a warp. Session 19's fp32 sweep
    (`explore_spmm_sweep_session19.txt`): 8 lanes best at N = 32 on band_narrow_10m and fem3d_b4_8m, 32 lanes and one
    slab best at N = 128 on band_narrow_10m (327 us against 414 at 8 lanes and 4 slabs: there the subsets' shuffles
    cost more than they save)."""
    lanes = rowsplit_lanes(N, vw)
    return lanes, min(4, -(-N // (lanes * vw)))


class CsrSpmm(CsrFamily):
    name = "csr_spmm"
    operation = "spmm"
    spec_model = CsrSpmmSpec
    kernels_dir = KERNELS_ROOT / "csr_spmm"
    preparations = {"row_group_union": row_group_union, "bsr_blocks": bsr_blocks,
                    "long_row_chunk_ptr": long_row_chunk_ptr}
    target_speedup = 3.0
    # a new version whenever prices change: calibrations measured against an older model no longer count
    cost_model = ("gathers plus DRAM; row split's idle lanes, warp imbalance and longest row, row groups' rows and lane "
                  "layout on CUDA cores, split rows, the tile's staging (session 20)")
    prices_row_walks = False  # its kernels are priced by bytes and tensor-core tiles (cost.py)
    reads_bfs_levels = False  # no renumbered SpMM kernel
    example_spec = {"name": "small_spmm", "operation": "spmm", "pattern": {"distribution": "uniform", "density": 0.02},
                    "M": 1024, "K": 1024, "N": 64, "dtype": "fp32", "budget": {"iterations": 4}}
    dense_name = "B"
    output_name = "C"

    def dense_columns(self, spec: CsrSpmmSpec) -> int:
        return spec.N

    def operand_features(self, spec: CsrSpmmSpec) -> dict[str, float]:
        return {"N": float(spec.N)}

    def strategies(self, spec: CsrSpmmSpec, features: Mapping[str, float]) -> list[StrategyStart]:
        """Every kernel at a start chosen from the features, ranked by its predicted time (`cost.py`): row split
        where rows share few columns, row groups (tensor cores for 16-bit values, CUDA cores in any dtype) where
        groups of rows share them and no row is so long that a group's tile outgrows shared memory, BSR on tensor cores
        where blocks are dense (16-bit values only: the planner drops what the dtype rules out)."""
        overlap = features["group_overlap"]
        # widest column tiling whose last warp still has columns (the kernel's constraint, checked again by the planner)
        wn = max(w for w in (1, 2, 4) if w == 1 or 16 * 4 * (w - 1) < spec.N)
        vw = 16 // dtype_info(spec.dtype).bytes
        lanes = rowsplit_lanes(spec.N, vw)
        rowsplit = StrategyStart(
            "spmm_csr_rowsplit",
            {"VW": vw, "LANES": lanes, "WARPS": 4, "UNROLL": 8 if spec.dtype == "fp32" else 4},
            f"{lanes} lanes per row with 16-byte gathers of B rows ({lanes * vw} columns a group): robust at any "
            "density")
        # offered where some row is over LONG_ROW_START nonzeros, then splitting from SPMM_LONG_ROW: rows over 128 in
        # chunks of 512 beat 256 and 1024 on three of four skewed matrices (fp32 N = 32, session 20, 2-13% faster;
        # the fourth within 0.2%)
        split = StrategyStart(
            "spmm_csr_split", {"VW": vw, "LANES": lanes, "WARPS": 4, "UNROLL": 8 if spec.dtype == "fp32" else 4,
                               "LONG_ROW": SPMM_LONG_ROW, "CHUNK": 4 * SPMM_LONG_ROW},
            f"the longest row has {features['row_max']:.0f} nonzeros: rows over {SPMM_LONG_ROW} cut into chunks "
            f"of {4 * SPMM_LONG_ROW} (a warp's lane groups then walk about as many each as a group walks a short "
            "row), a warp each, the rest as row split")
        smem_tile = StrategyStart(
            "spmm_csr_smem_tile", {"LPR": 8, "WARPS": 32, "RPG": 1, "KC": 512, "UNROLL": 4},
            "a column slice of B in shared memory, reused by many rows: far less L2 traffic than row split, "
            "though latency-bound and slower on the uniform matrices measured")
        # 8 rows a group, as measured; 16 rows (more columns shared on bands, twice the accumulators) is in the space,
        # not yet measured (session 19)
        group_rows = 8
        tile_bytes = rowgroup_tile_bytes(features, group_rows)
        group_lanes, slabs = rowgroup_lanes_and_slabs(spec.N, vw)
        # UNROLL 2: UNROLL 4 with 8 warps took about 100 registers and was slower in every pair of session 19's sweep
        # (with 4 warps it won by 0.7-2.7% in two pipeline runs, a step the search takes)
        rowgroup = StrategyStart(
            "spmm_csr_rowgroup", {"VW": vw, "LANES": group_lanes, "SLABS": slabs, "UNROLL": 2, "ROWS": group_rows,
                                  "WARPS": max((w for w in (1, 2, 4) if w * tile_bytes <= 48 * 1024), default=1)},
            f"a warp per group of {group_rows} rows gathers each B row the group touches once, its union shared out "
            f"among {32 // group_lanes} lane subset(s): groups share columns "
            f"{group_overlap(features, group_rows):.2f}x on average, exact on CUDA cores")
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
        ranked = [replace(s, predicted_us=self.predicted_us(spec, features, s.kernel, s.start))
                  for s in (rowsplit, rowgroup, smem_tile, tensor, bsr, split)
                  if (s not in (rowgroup, tensor)
                      or start_shared_bytes(s.kernel, s.start, features) <= ROWGROUP_TILE_LIMIT)
                  and (s is not split or features["row_max"] > LONG_ROW_START)]
        return sorted(ranked, key=lambda s: s.predicted_us)

    def predicted_us(self, spec: CsrSpmmSpec, features: Mapping[str, float], kernel: str,
                     params: Mapping[str, int]) -> float:
        return predicted_us(kernel, params, features, spec.N, dtype_info(spec.dtype).bytes)

    def carried_params(self, spec: CsrSpmmSpec, other: CsrSpmmSpec, accepted: Mapping[str, int],
                       start: Mapping[str, int]) -> dict[str, int]:
        """At another N, the lane layout (LANES, SLABS) is this N's start: it is chosen from N (`rowsplit_lanes`),
        and a neighbour's at N = 32 carried to N = 128 went first twice at 8 lanes (the row groups at 489 us against
        327 at 32 lanes, session 19; the split kernel 714 us on circuit_5m where row split at 32 lanes took 625,
        session 20)."""
        carried = dict(accepted)
        if other.N != spec.N:
            carried.update({k: start[k] for k in ("LANES", "SLABS") if k in start and k in carried})
        return carried


FAMILY = CsrSpmm()
