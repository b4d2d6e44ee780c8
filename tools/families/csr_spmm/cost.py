"""A cost model per SpMM kernel (C = A B, A in CSR, B dense K x N): how many B elements it pulls through L2 per
call, at the rate each kernel was measured to pull them on the H200, plus its DRAM bytes at copy bandwidth, plus a
launch. The sum, not the larger of the two: over session 19's 47 timed candidates of four kernels on three matrices
(`bench/spmm_cost_check.py`, `evals/results/issue14_h200/spmm_cost_check_session19_sum.txt`) measured over
predicted is 1.47 in geometric mean (0.83-2.87) as the sum and 2.51 (1.11-5.29) as the larger: the gathers and the
DRAM streams overlap little. UNROLL and WARPS are not priced.

The rates are measurements, not guesses (bench/NOTES.md, sessions 2-4, M = K = 4096, N = 256):
- row split, one B row per nonzero: fp32 5% 73.2 us and 1% 21.2 us (3.0e6 products per us); fp16 5% 61.8 us
  (3.6e6: the 16-bit B rows are half the bytes);
- tensor-core row groups, one B row per column of a group of 8 rows (nnz / group_overlap of them): uniform 5%
  65.4 us, banded 5% 33.4 us, uniform 1% 21.1 us (2.75e6 elements per us);
- row split's lanes: at N = 32 fp32 on a 10M-nonzero band (session 18) a warp per row took 750, 446 and 287 us at
  VW 4, 2 and 1 (a quarter, half and all of its lanes on columns): the gathers' time goes with the idle lanes, less
  a gain for wide loads of (16 / load bytes)^0.22 (the fit of those three with the DRAM time added; 8 lanes of VW 4,
  every lane busy, measured 243.8 us in session 19);
- the shared-memory tile was slower than row split on every spec measured (120-300 us against 18-73 us): it is
  priced at 2.5x row split, or at the copies of B it makes when they take longer: every block stages all K rows
  of its column slice (a 10M-nonzero band with K = 1M took 133 ms, session 18).
Row groups on CUDA cores pull one B row per union column of a group at 1/1.25 of row split's rate, in 16 bits no
faster than 1.1x the tensor-core row groups' time (not measured yet), times the cost of their lane layout (fitted to
session 19's sweep of it on band_narrow_10m fp32, `evals/results/issue14_h200/explore_spmm_sweep_session19.txt`):
each halving of the rows a lane keeps (subsets sharing out the union) 15% for its shuffles, each further pass of the
grid over A (N wider than a warp's slabs) 5%. At N = 128, 8 lanes a piece and one slab measured 1.51x 32 lanes
(layout factor 1.49x); 4 lanes and one slab 2.24x (1.96x). Groups of 16 rows cost ROWGROUP_16_ROWS_COST more than
the gathers they save say: fitted to session 20's seven pairs at the same layout (`explore_spmm_rows16_session20.txt`,
16 rows 9-28% slower than 8 on band_narrow_10m and blockdiag_8_32_10m fp32, measured over predicted 1.35x higher
with 16 rows than with 8 at the old 1.1).
Row split's groups each walk a row of their own, 32 / LANES rows a warp: a warp lasts as long as its longest row, so
its gathers' time is multiplied by the warp imbalance of the row lengths (tools/structure.py `warp_imbalance`; 2.1-2.6
on session 20's web, power-law and LP matrices at 4 rows a warp, where the split kernel measured 1.8-2.4x its price
without it). A group walks a whole row, UNROLL gathers a round: the longest row's rounds bound its time however many
warps run beside it, at ROUND_US each (fitted to row split at N = 32 on session 20's circuit, LP and web matrices:
its time over the longest row's rounds 1.2, 1.2 and 1.4 us: an index load and then the gathers it names, two
dependent trips to memory). Every kernel's longest chain is priced the same way, at ROUND_US a round (fitted on row
split only; for the others a guess): the shared-memory tile's group walks a row too, the row groups' subsets share
out the longest group's union (UNROLL columns a round), the tensor-core row groups take it in steps of 16 columns
(KB steps a round), BSR's warp takes its block row's blocks one at a time. Chains are counted only where some row
is over LONG_ROW_START nonzeros, where the split kernel is offered: below that the rates above, measured on such
matrices, hold them. On real matrices with a row of hundreds to thousands of nonzeros (`../shared/matrices`: a
circuit, a vote graph, an arrow-head matrix, LP) those kernels were priced first at a few microseconds with their
chains unpriced; BSR on the arrow-head matrix (a row of 46,500) at 6.1 us, against a 5,800-block chain. The split
kernel (spmm_csr_split) cuts rows over LONG_ROW into chunks of CHUNK shared
by a warp's 32 / LANES groups: it pulls what row split does at the imbalance of the rows left to groups, plus its
partial rows written and read, and its longest walk is LONG_ROW or CHUNK / groups nonzeros, plus a second launch.
Over session 19's and 20's 90 timed candidates (`bench/spmm_cost_check.py`, spmm_cost_check_session20.txt) measured
over predicted is 1.28 in geometric mean, row split 1.06 and the split kernel 1.19 (1.51 and 1.55 before these terms).
BSR on tensor cores pulls one B row per block column of each block (the same path as the row groups) and is
priced at their rate; it has no measurement yet. The planner scales each prediction by the kernel's calibration
from earlier runs on the same GPU (the experience store).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

COPY_BYTES_PER_US = 4.25e6  # 4.25 TB/s, evals/results/floors_h200.json
LAUNCH_US = 2.5
ROWSPLIT_PRODUCTS_PER_US = {4: 3.0e6, 2: 3.6e6}  # by value bytes
TENSOR_ELEMENTS_PER_US = 2.75e6
SMEM_TILE_OVER_ROWSPLIT = 2.5
SHARED_PER_SM = 228 * 1024
ROWGROUP_16BIT_OVER_TENSOR = 1.1
# a union column costs the row group more than a nonzero costs row split (its mask and column loads, the values'
# scatter into the tile, a shared-memory read per product): a guess, so that rows sharing few columns stay on row split
ROWGROUP_OVER_ROWSPLIT = 1.25
ROUND_US = 1.2
LONG_ROW_START = 256
ROWGROUP_SUBSET_COST = 0.15
ROWGROUP_PASS_COST = 0.05
ROWGROUP_16_ROWS_COST = 1.5


def group_overlap(f: Mapping[str, float], rows: int = 8) -> float:
    """Nonzeros over union columns for groups of `rows` rows (8 or 16), at least 1."""
    return max(f.get("group_overlap" if rows == 8 else f"group_overlap_{rows}", 1.0), 1.0)


def longest_union(f: Mapping[str, float], rows: int = 8) -> float:
    """The longest group's union of columns, estimated as its rows at the longest length shared at the mean rate
    (padded to 16, at most K)."""
    return min(rows * f["row_max"] / group_overlap(f, rows), f["cols"]) + 16


def rowgroup_tile_bytes(f: Mapping[str, float], rows: int = 8) -> float:
    """One warp's tile in the row-group kernel, ROWS x (max_union + 8) floats."""
    return rows * (longest_union(f, rows) + 8) * 4


def dram_bytes(f: Mapping[str, float], N: int, value_bytes: int, stored_values: float, indices: float) -> float:
    """A's stored values and indices, the row pointers, B once and C once."""
    return (stored_values * value_bytes + indices * 4 + 4 * (f["rows"] + 1) + f["cols"] * N * value_bytes
            + f["rows"] * N * value_bytes)


def rowsplit_lane_factor(start: Mapping[str, int], N: int, value_bytes: int) -> float:
    """Row split's time over its time with every lane on columns and 16-byte loads."""
    width = start["LANES"] * start["VW"]
    busy = N / (-(-N // width) * width)
    return (16 / (start["VW"] * value_bytes)) ** 0.22 / busy


def rowgroup_layout_factor(start: Mapping[str, int], N: int) -> float:
    """The row groups' time over their time with one subset of lanes and one pass over A (see the module's note)."""
    subsets, rows = 32 // start["LANES"], start.get("ROWS", 8)
    passes = -(-N // (start["LANES"] * start["VW"] * start.get("SLABS", 1)))
    # 16 rows: twice the shuffles a halving, and twice the accumulators (fewer warps a SM), fitted (module note)
    more_rows = ROWGROUP_16_ROWS_COST if rows == 16 else 1.0
    return (more_rows * (1 + ROWGROUP_SUBSET_COST * rows / 8 * math.log2(subsets))
            * (1 + ROWGROUP_PASS_COST * (passes - 1)))


def imbalance_factor(f: Mapping[str, float], lanes: int, short: bool = False) -> float:
    """The nonzeros a warp's groups walk, each its own row, over the nonzeros (tools/structure.py; 1 at a row a
    warp); `short`: the split kernel's, whose long rows go to chunks."""
    rows = 32 // lanes
    return 1.0 if rows == 1 else max(f.get(f"warp_imbalance{'_short' if short else ''}_{rows}", 1.0), 1.0)


def longest_walk_us(nonzeros: float, unroll: int) -> float:
    """One lane group's serial walk over `nonzeros` of a row, UNROLL gathers a round (the column slabs of the grid
    walk side by side)."""
    return nonzeros / unroll * ROUND_US


def chain_us(f: Mapping[str, float], items: float, per_round: int) -> float:
    """A kernel's longest serial chain, `items` taken `per_round` a round, where some row is over LONG_ROW_START
    nonzeros (0 elsewhere: see the module's note)."""
    return longest_walk_us(items, per_round) if f.get("row_max", 0.0) > LONG_ROW_START else 0.0


def predicted_us(kernel: str, start: Mapping[str, int], f: Mapping[str, float], N: int, value_bytes: int) -> float:
    nnz = f["nnz"]
    csr_dram = dram_bytes(f, N, value_bytes, nnz, nnz) / COPY_BYTES_PER_US
    rowsplit = nnz * N / ROWSPLIT_PRODUCTS_PER_US[value_bytes]
    if kernel == "spmm_csr_rowsplit":
        walk = chain_us(f, f["row_max"], start["UNROLL"])
        pulled = max(rowsplit * rowsplit_lane_factor(start, N, value_bytes) * imbalance_factor(f, start["LANES"]), walk)
        dram = csr_dram
    elif kernel == "spmm_csr_split":
        groups = 32 // start["LANES"]
        walk = max(min(f["row_max"], start["LONG_ROW"]),
                   min(f["row_max"], start["CHUNK"]) / groups)
        pulled = max(rowsplit * rowsplit_lane_factor(start, N, value_bytes) * imbalance_factor(f, start["LANES"], True),
                     longest_walk_us(walk, start["UNROLL"]))
        # the dense rows' nonzeros (about the long ones) as partial rows of CHUNK: written once, read once, in fp32
        partials = 2 * 4 * N * f.get("dense_row_share", 0.0) * nnz / start["CHUNK"]
        dram = csr_dram + partials / COPY_BYTES_PER_US + LAUNCH_US
    elif kernel == "spmm_csr_smem_tile":
        rows_per_block = start["WARPS"] * (32 // start["LPR"]) * start["RPG"]
        staged = -(-f["rows"] // rows_per_block) * f["cols"] * N * value_bytes  # every block, all of K
        pulled = max(SMEM_TILE_OVER_ROWSPLIT * rowsplit, staged / COPY_BYTES_PER_US,
                     chain_us(f, f["row_max"], start["UNROLL"]))  # a group of LPR lanes walks a row
        dram = csr_dram
    elif kernel == "spmm_csr_rowgroup":
        # row split's rate, one gather per union column of a group (padded to 16: 7.5 more a group on average),
        # slowed when the tiles leave fewer than 16 warps an SM to hide the gathers' latency
        rows = start.get("ROWS", 8)
        unions = nnz / group_overlap(f, rows) + 7.5 * f["rows"] / rows
        tile = rowgroup_tile_bytes(f, rows)
        warps = min(64, start["WARPS"] * min(32, int(SHARED_PER_SM // (start["WARPS"] * tile))))
        pulled = (ROWGROUP_OVER_ROWSPLIT * unions * N / ROWSPLIT_PRODUCTS_PER_US[value_bytes]
                  * rowsplit_lane_factor(start, N, value_bytes) * rowgroup_layout_factor(start, N))
        if value_bytes == 2:  # unmeasured in 16 bits: behind the tensor-core row groups' measured gathers
            pulled = max(pulled, ROWGROUP_16BIT_OVER_TENSOR * unions * N / TENSOR_ELEMENTS_PER_US)
        pulled /= min(1.0, warps / 16)
        # the longest group's union, shared out among the warp's subsets, UNROLL columns a round
        pulled = max(pulled, chain_us(f, longest_union(f, rows) / (32 // start["LANES"]), start["UNROLL"]))
        dram = csr_dram + nnz * 4 / COPY_BYTES_PER_US  # the tile places beside the values
    elif kernel == "spmm_csr_tc_rowgroup":
        pulled = nnz / max(f.get("group_overlap", 1.0), 1.0) * N / TENSOR_ELEMENTS_PER_US
        # the longest group's union in steps of 16 columns split among WK warps, KB steps' gathers a round
        pulled = max(pulled, chain_us(f, longest_union(f) / (16 * start["WK"]), start["KB"]))
        dram = csr_dram
    elif kernel == "spmm_bsr_tc":
        block = start["BR"]
        fill = max(f.get(f"block_fill_{block}", 0.0), 1e-6)  # nonzeros over stored values
        stored = nnz / fill
        pulled = stored / block * N / TENSOR_ELEMENTS_PER_US  # one B row per block column of each block
        # a warp takes a block row's blocks one after another: the longest block row (its longest row and the mean
        # of the others, over the nonzeros a stored block holds) at a block a round
        longest = min((f["row_max"] + (block - 1) * f.get("row_mean", 0.0)) / (block * start["BC"] * fill),
                      f["cols"] / start["BC"])
        pulled = max(pulled, chain_us(f, longest, 1))
        dram = dram_bytes(f, N, value_bytes, stored, stored / (block * block)) / COPY_BYTES_PER_US
    else:
        raise KeyError(f"no cost model for {kernel}")
    return pulled + dram + LAUNCH_US
