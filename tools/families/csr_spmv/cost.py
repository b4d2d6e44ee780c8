"""A cost model per SpMV kernel: the bytes its format moves, the bandwidth it can reach, the tail its longest row
makes and the launches it needs, from the structural features alone (no matrix is built).

The numbers are priors for an H200: copy bandwidth 4.25 TB/s and 60 MB of L2 (`evals/results/floors_h200.json`);
the row walks' step times fitted to measured candidates (below); the per-kernel efficiencies first guesses, four of
them corrected by measurements (`python3 bench/cost_model_check.py` prints the model against all of them). The planner multiplies each prediction by the kernel's calibration from earlier
measurements (the experience store), so the priors only order the first run's candidates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sparseditto.tools.families.csr_spmv.bsr import mask_bits
from sparseditto.tools.families.csr_spmv.nonempty import FILL_ROWS_PER_THREAD
from sparseditto.tools.structure import H200_L2_BYTES, SHORT_ROW, WARP_LANES

COPY_BYTES_PER_US = 4.25e6  # 4.25 TB/s
LAUNCH_US = 2.5  # one kernel launch with its ramp-up and drain, as a floor per launch
SECTOR = 32  # bytes a scattered x read costs when x does not stay in L2
# scattered x reads the whole GPU completes per microsecond: 16.8M random-column reads (x in L2) in 116.9 us,
# `gathers` in evals/results/floors_h200.json
GATHERS_PER_US = 16_777_216 / 116.9
# Row walks (the row-per-group kernels) are bound by latency, not bandwidth: each step loads column indices and then
# the x values they point to. Fitted to 16 measured candidates on four suite matrices (H200, fp32; session 10):
# one step of a warp walking alone (the longest row's tail): 201 us for 126 steps (circuit, 16 lanes per row) and
# 437 us for 250 (empty70, 4 lanes)
STEP_US = 1.6
# warp steps the whole GPU completes per microsecond when many warps walk (1250-2600 across the 16 candidates)
WALK_STEPS_PER_US = 1800.0
# spmv_bsr's warp steps (32 / B blocks a lane group each, UNROLL deep): fem3d_b3_30m at B 3, where the walk binds,
# took 68.0 us for 174k of them (the model's count: bsr_layout's blocks, 20 a step; session 18); fem3d_b6 and fem3d_b4
# measured within this rate
BSR_WALK_STEPS_PER_US = 2560.0
# warps the whole GPU starts, reads two row pointers in and retires per microsecond when their rows are empty:
# spmv_csr_vec4 on hypersparse_1m (12.5M rows, 98% empty) took 1499.6 us at 16 lanes per row (6.25M warps) and
# 2974.9 us at 32 (12.5M); split vec4 on empty95_tall_4m (13.3M rows) 235.5 and 409.5 us at 2 and 4 lanes (H200,
# session 16). A floor under the walk, not added to it: where rows are full the warps' loads hide it.
WARPS_PER_US = 4200.0

# the share of copy bandwidth a kernel reaches on rows that keep it busy (guesses unless noted; calibrated by
# measurements in the experience store)
EFFICIENCY = {
    "spmv_csr_vec4": 0.60,  # 0.80 guessed; 1.2-1.8x slower than that on rows of 3-7 nonzeros and on FEM (session 11)
    "spmv_csr_split_vec4": 0.78,
    "spmv_merge_path": 0.40,  # 0.70 guessed, 0.47 from circuit and empty70; 1.1-1.7x slower than 0.47 on 5 more (session 11)
    "spmv_sell_c_sigma": 0.80,
    # 0.85 guessed; band_narrow 0.40, two stencils 0.45-0.51 (sessions 10-11). Since its loads stopped waiting for the
    # mask, five stencils above L2 measured 0.62-0.83 of this price (session 18, spmv_candidates_session18.json); kept
    # until the new kernel is measured on a band: at 0.65 it would go first on band_narrow_10m, whose only DIA
    # measurement (the old kernel) is 1.26x slower than u16
    "spmv_dia": 0.45,
    "spmv_csr_u16": 0.60,  # 0.78 guessed; as vec4 (same walk): 1.3-1.7x slower than that on FEM and a 3D stencil (session 11)
    # as vec4 (the same walk over the nonempty rows); its first form ran latency-bound at 0.82-0.89 TB/s on
    # hypersparse_1m (session 16), the present one is not measured
    "spmv_csr_nonempty": 0.60,
    # a guess, as u16 (a walk of similar loads); six candidates measured 0.69-1.36 of its price, geometric mean 0.99
    # (FEM blocks faster than priced, block-diagonal ones slower; session 18)
    "spmv_bsr": 0.60,
    "spmv_csr_rcm": 0.60,  # as vec4 (the same walk); not measured
}
# after RCM renumbering a mesh or road grid is banded: its x reads are priced at the sectors of a band, a quarter of
# a sector per nonzero in fp32 (band_narrow_10m's feature: 0.26), a guess until measured
RCM_X_SECTORS_PER_NNZ = 0.25
# the block sizes spmv_bsr offers (a 64-bit mask per block at most), each with its fill among the features
BSR_BLOCKS = (2, 3, 4, 6, 8)


# lanes that walk a row alone (GROUP 1) read 16-byte pieces of 32 different rows per load: both CSR walks measured
# 1.4x their bandwidth term on a 3D stencil (session 11); with this factor stencil3d's are priced within 7%, and
# stencil2d's vec4 1.3x too slow (85.3 us measured, 111.2 priced; `python3 bench/cost_model_check.py`)
LONE_LANE_EFFICIENCY = 0.75


def walk_us(steps_per_row: float, f: Mapping[str, float], unroll: int) -> float:
    """Every warp's walk at the GPU's rate; the features count steps of two loads per lane (UNROLL 2)."""
    return steps_per_row * f["rows"] * 2 / max(unroll, 1) / WALK_STEPS_PER_US


def x_bytes(f: Mapping[str, float], value_bytes: int) -> float:
    """x read once from DRAM while it fits in L2; beyond that, half of the scattered reads miss and cost a
    sector each."""
    # a nonzero touches one sector at most: a hypersparse matrix reads a small part of a long x
    once = min(f["cols"] * value_bytes, scattered_reads(f) * SECTOR)
    if once <= H200_L2_BYTES / 2:
        return once
    return once + scattered_reads(f) * SECTOR / 2


def once_in_scattered_order(elements: float, element_bytes: int) -> float:
    """An array read or written once, element by element in a scattered order (RCM's permutations of x and y): its
    bytes while it fits in half of L2 (a sector stays until its other elements come), beyond that half of the
    elements cost a sector each as well."""
    nbytes = elements * element_bytes
    return nbytes if nbytes <= H200_L2_BYTES / 2 else nbytes + elements * SECTOR / 2


def scattered_reads(f: Mapping[str, float]) -> float:
    """x reads that start a new sector: the distinct 32-byte sectors of x each band of rows reads."""
    return f["nnz"] * f.get("x_sectors_per_nnz", 1.0)


def csr_bytes(f: Mapping[str, float], value_bytes: int, index_bytes: float = 4.0) -> float:
    """Values and column indices of every nonzero, the row pointers, x and y."""
    return (f["nnz"] * (index_bytes + value_bytes) + 4 * (f["rows"] + 1) + x_bytes(f, value_bytes)
            + f["rows"] * value_bytes)


def dia_layout(f: Mapping[str, float], max_diags: int) -> tuple[float, float]:
    """(diagonals stored, share of nonzeros on them): the densest `max_diags` of the distinct diagonals seen."""
    sampled_rows = min(f["rows"], 65536.0)
    distinct = max(1.0, f.get("diagonals_per_row", 1.0) * sampled_rows)
    stored = min(float(max_diags), distinct)
    shares = {1: f.get("diag_share_top1", 0.0), 8: f.get("diag_share_top8", 0.0), 32: f.get("diag_share_top32", 0.0)}
    # the share on the densest `stored` diagonals, interpolated in log between the measured points (64: as 32)
    points = sorted(shares.items())
    if stored >= distinct:  # every diagonal the sample holds
        share = 1.0
    elif stored >= 32:
        share = shares[32]
    else:
        lo = max((p for p in points if p[0] <= stored), default=points[0])
        hi = min((p for p in points if p[0] >= stored), default=points[-1])
        w = 0.0 if hi[0] == lo[0] else (math.log(stored) - math.log(lo[0])) / (math.log(hi[0]) - math.log(lo[0]))
        share = lo[1] + w * (hi[1] - lo[1])
    return stored, min(1.0, share)


def bsr_layout(f: Mapping[str, float], block: int) -> tuple[float, float]:
    """(blocks stored, their fill: nonzeros over stored elements) of the B x B blocking, from the sampled fill."""
    fill = max(f.get(f"block_fill_{block}", 0.0), 1e-6)
    return f["nnz"] / (fill * block * block), fill


def predicted_us(kernel: str, start: Mapping[str, int], f: Mapping[str, float], value_bytes: int,
                 fitted: bool = True) -> float:
    """The kernel's time at its starting parameters: the longest of moving its bytes at the bandwidth it reaches,
    the scattered reads of x, every warp's row walk at the GPU's rate of steps, and the walk of the longest row
    where one group or warp walks it alone; plus launches. `fitted` False sets every bandwidth efficiency (the
    lone-lane factor too) to 1: the model's structure without the constants fitted to measurements
    (evals/cost_model_check.py prices with it)."""
    efficiency = EFFICIENCY[kernel] * (LONE_LANE_EFFICIENCY if start.get("GROUP") == 1 else 1.0) if fitted else 1.0
    bandwidth = COPY_BYTES_PER_US * efficiency
    row_max = f["row_max"]
    launches, tail, walk, gathers = 1, 0.0, 0.0, scattered_reads(f)
    # the time to start the warps of a row-per-group walk: one per 32 / GROUP rows, empty ones included
    warps_us = f["rows"] * start.get("GROUP", 0) / 32 / WARPS_PER_US
    if kernel in ("spmv_csr_vec4", "spmv_csr_rcm"):  # one walk: RCM walks its renumbered rows as vec4 does
        walk = max(walk_us(f[f"walk_steps_{start['GROUP']}"], f, start["UNROLL"]), warps_us)
        tail = row_max / (4 * start["GROUP"] * max(start["UNROLL"], 1)) * STEP_US
        if kernel == "spmv_csr_vec4":
            moved = csr_bytes(f, value_bytes)
        else:
            # the renumbered matrix, x' read in its banded order and written by the permutation, which reads x in
            # scattered order, y stored in scattered order, and the two renumberings
            renumbered = {**f, "x_sectors_per_nnz": RCM_X_SECTORS_PER_NNZ}
            moved = (f["nnz"] * (4 + value_bytes) + 4 * (f["rows"] + 1) + x_bytes(renumbered, value_bytes)
                     + f["cols"] * value_bytes + once_in_scattered_order(f["cols"], value_bytes)
                     + once_in_scattered_order(f["rows"], value_bytes) + 4 * (f["cols"] + f["rows"]))
            gathers = f["nnz"] * RCM_X_SECTORS_PER_NNZ + f["cols"] + f["rows"]
            launches = 2
    elif kernel == "spmv_csr_nonempty":
        nonempty_rows = f["rows"] * (1.0 - f["empty_rows"])
        # values and columns, the walk list (row, start, end) and the fill's sorted list, x, and y (every row once)
        moved = (f["nnz"] * (4 + value_bytes) + 16 * nonempty_rows + x_bytes(f, value_bytes)
                 + f["rows"] * value_bytes)
        # rows over LONG_ROW (its start's 64 is the features' SHORT_ROW) get a warp each; the fill a warp per
        # FILL_ROWS_PER_THREAD * 32 rows
        long_rows = f["rows"] * f["long_rows"]
        fill_warps = f["rows"] / (FILL_ROWS_PER_THREAD * WARP_LANES)
        started_us = ((nonempty_rows - long_rows) * start["GROUP"] / WARP_LANES + long_rows + fill_warps) / WARPS_PER_US
        walk = max(walk_us(f[f"walk_nonempty_short_steps_{start['GROUP']}"] + f["long_row_steps"], f, start["UNROLL"]),
                   started_us)
        tail = min(row_max, SHORT_ROW) / (4 * start["GROUP"] * max(start["UNROLL"], 1)) * STEP_US
        tail = max(tail, row_max / (4 * 32 * max(start["UNROLL"], 1)) * STEP_US)
    elif kernel == "spmv_csr_split_vec4":
        moved = csr_bytes(f, value_bytes)
        # rows over LONG_ROW go to a warp per chunk (its start's 64 is the features' SHORT_ROW)
        walk = max(walk_us(f[f"walk_short_steps_{start['GROUP']}"] + f["long_row_steps"], f, start["UNROLL"]), warps_us)
        tail = min(row_max, start["CHUNK"]) / (4 * 32) * STEP_US
        # the finishing launch, when there are long rows; launched early it overlaps the first one's tail (1.3-3.9 us
        # saved on three matrices, session 16: about a launch's cost)
        launches = 2 if row_max > start["LONG_ROW"] and not start.get("EARLY") else 1
    elif kernel == "spmv_merge_path":
        moved = csr_bytes(f, value_bytes) + 4 * f["rows"]  # every row end read once more by the path search
        launches = 2  # the tiles, then the rows that cross a tile boundary
    elif kernel == "spmv_sell_c_sigma":
        # a slice costs its longest row; sorting in windows leaves padding where lengths vary within C rows
        padding = min(1.0, f["row_cv"] * start["C"] / max(start["SIGMA"], 1) * 4)
        moved = csr_bytes(f, value_bytes) * (1 + padding) + 8 * f["rows"]  # row_perm and row_len
        # a warp walks a slice of C rows, two nonzeros per thread and step, as long as its longest (padded) row: the
        # row-walk rate assumed the same as the measured kernels' (SELL itself not measured yet)
        walk = f["nnz"] * (1 + padding) / (2 * start["C"]) / WALK_STEPS_PER_US
        tail = row_max * STEP_US / 2  # one thread walks the longest row, two nonzeros per step
    elif kernel == "spmv_dia":
        # the kernel's bytes as measured in sessions 10-11 (4-byte mask words, row pointers always read); since
        # session 12 it reads 1-2 byte words and skips an empty remainder's pointers: the model keeps the first
        # kernel's bytes until a measurement on a band refits DIA's efficiency
        stored, share = dia_layout(f, start["MAX_DIAGS"])
        rest = f["nnz"] * (1.0 - share)
        moved = (stored * f["rows"] * value_bytes + math.ceil(stored / 32) * 4 * f["rows"]
                 + rest * (4 + value_bytes) + 4 * (f["rows"] + 1) + f["cols"] * value_bytes + f["rows"] * value_bytes)
        tail = (row_max * (1.0 - share)) * STEP_US / 2
        gathers *= 1.0 - share  # x along a diagonal is read at consecutive addresses
    elif kernel == "spmv_bsr":
        B = start["B"]
        blocks, _ = bsr_layout(f, B)
        block_rows = math.ceil(f["rows"] / B)
        # each stored block's values, column and mask word; the block row pointers, x and y
        moved = (blocks * (B * B * value_bytes + 4 + mask_bits(B) / 8) + 4 * (block_rows + 1) + x_bytes(f, value_bytes)
                 + f["rows"] * value_bytes)
        gathers = blocks  # x is read B entries at a time, once per block
        per_step = (WARP_LANES // B) * start["UNROLL"]  # blocks a warp loads at once
        walk = max(blocks / per_step / BSR_WALK_STEPS_PER_US, block_rows / WARPS_PER_US)
        tail = math.ceil(row_max / B / per_step) * STEP_US  # the longest block row's warp
    elif kernel == "spmv_csr_u16":
        # 16-bit offsets where a row's columns span less than 64K (its base is its first column); the band's
        # half-width bounds the span, else every nonzero is assumed to fall back to its 32-bit index
        fits = 2 * f.get("bandwidth", 1.0) * f["cols"] < 65536
        moved = csr_bytes(f, value_bytes, index_bytes=2.0 if fits else 4.5)
        walk = max(walk_us(f[f"walk_steps_{start['GROUP']}"], f, start["UNROLL"]), warps_us)
        tail = row_max / (4 * start["GROUP"] * max(start["UNROLL"], 1)) * STEP_US
    else:
        raise KeyError(f"no cost model for {kernel}")
    return max(moved / bandwidth, gathers / GATHERS_PER_US, walk, tail) + LAUNCH_US * launches

