"""A cost model per SpMV kernel: the bytes its format moves, the bandwidth it can reach, the tail its longest row
makes and the launches it needs, from the structural features alone (no matrix is built).

The numbers are priors for an H200 (copy bandwidth 4.25 TB/s and 60 MB of L2, measured in
`evals/results/floors_h200.json`; the per-kernel efficiencies are guesses written down in bench/NOTES.md before
any measurement). The planner multiplies each prediction by the kernel's calibration from earlier measurements
(the experience store), so the guesses only order the first run's candidates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sparseditto.tools.structure import H200_L2_BYTES

COPY_BYTES_PER_US = 4.25e6  # 4.25 TB/s
LAUNCH_US = 2.5  # one kernel launch with its ramp-up and drain, as a floor per launch
SECTOR = 32  # bytes a scattered x read costs when x does not stay in L2
# scattered x reads the whole GPU completes per microsecond: 16.8M random-column reads (x in L2) in 116.9 us,
# `gathers` in evals/results/floors_h200.json
GATHERS_PER_US = 16_777_216 / 116.9
STEP_US = 0.35  # one dependent load step of one warp or thread (latency with two loads in flight)

# the share of copy bandwidth a kernel reaches on rows that keep it busy (guesses, calibrated by measurements)
EFFICIENCY = {
    "spmv_csr_vec4": 0.80,
    "spmv_csr_split_vec4": 0.78,
    "spmv_merge_path": 0.70,
    "spmv_sell_c_sigma": 0.80,
    "spmv_dia": 0.85,
    "spmv_csr_u16": 0.78,
}


def x_bytes(f: Mapping[str, float], value_bytes: int) -> float:
    """x read once from DRAM while it fits in L2; beyond that, half of the scattered reads miss and cost a
    sector each."""
    once = f["cols"] * value_bytes
    if once <= H200_L2_BYTES / 2:
        return once
    return once + scattered_reads(f) * SECTOR / 2


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


def predicted_us(kernel: str, start: Mapping[str, int], f: Mapping[str, float], value_bytes: int) -> float:
    """The kernel's time at its starting parameters: the longest of moving its bytes at the bandwidth it reaches,
    the scattered reads of x, and the walk of the longest row where one thread or warp walks it alone; plus
    launches."""
    bandwidth = COPY_BYTES_PER_US * EFFICIENCY[kernel]
    row_max, row_mean = f["row_max"], max(f["row_mean"], 1e-9)
    launches, tail, gathers = 1, 0.0, scattered_reads(f)
    if kernel == "spmv_csr_vec4":
        moved = csr_bytes(f, value_bytes)
        tail = row_max / (4 * start["GROUP"]) * STEP_US / max(start["UNROLL"], 1)
        # lanes idle on rows shorter than a group's load step
        bandwidth *= min(1.0, 0.4 + 0.6 * row_mean / (4 * start["GROUP"]))
    elif kernel == "spmv_csr_split_vec4":
        moved = csr_bytes(f, value_bytes)
        tail = min(row_max, start["CHUNK"]) / (4 * 32) * STEP_US
        bandwidth *= min(1.0, 0.4 + 0.6 * row_mean / (4 * start["GROUP"]))
        launches = 2 if row_max > start["LONG_ROW"] else 1
    elif kernel == "spmv_merge_path":
        moved = csr_bytes(f, value_bytes) + 4 * f["rows"]  # every row end read once more by the path search
        launches = 2  # the tiles, then the rows that cross a tile boundary
    elif kernel == "spmv_sell_c_sigma":
        # a slice costs its longest row; sorting in windows leaves padding where lengths vary within C rows
        padding = min(1.0, f["row_cv"] * start["C"] / max(start["SIGMA"], 1) * 4)
        moved = csr_bytes(f, value_bytes) * (1 + padding) + 8 * f["rows"]  # row_perm and row_len
        tail = row_max * STEP_US / 2  # one thread walks the longest row, one coalesced load per step
    elif kernel == "spmv_dia":
        stored, share = dia_layout(f, start["MAX_DIAGS"])
        rest = f["nnz"] * (1.0 - share)
        moved = (stored * f["rows"] * value_bytes + math.ceil(stored / 32) * 4 * f["rows"]
                 + rest * (4 + value_bytes) + 4 * (f["rows"] + 1) + f["cols"] * value_bytes + f["rows"] * value_bytes)
        tail = (row_max * (1.0 - share)) * STEP_US / 2
        gathers *= 1.0 - share  # x along a diagonal is read at consecutive addresses
    elif kernel == "spmv_csr_u16":
        # 16-bit offsets where a row's columns span less than 64K (its base is its first column); the band's
        # half-width bounds the span, else every nonzero is assumed to fall back to its 32-bit index
        fits = 2 * f.get("bandwidth", 1.0) * f["cols"] < 65536
        moved = csr_bytes(f, value_bytes, index_bytes=2.0 if fits else 4.5)
        tail = row_max / (4 * start["GROUP"]) * STEP_US / max(start["UNROLL"], 1)
        bandwidth *= min(1.0, 0.4 + 0.6 * row_mean / (4 * start["GROUP"]))
    else:
        raise KeyError(f"no cost model for {kernel}")
    return max(moved / bandwidth, gathers / GATHERS_PER_US, tail) + LAUNCH_US * launches

