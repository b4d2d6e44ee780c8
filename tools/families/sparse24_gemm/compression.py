"""A 2:4 sparse matrix in the compressed form the sparse tensor cores read: kept values plus 2-bit positions.

`A_values` (M x K/2, row-major, the input's storage type) holds, for every row and every aligned group of four
logical columns 4q .. 4q+3, the group's two kept values at compressed columns 2q and 2q+1, the one at the lower
logical column first. A group with fewer than two nonzeros still keeps two slots; the spare ones hold zeros.

`A_meta` (int32, M*K/32 words, read as unsigned bits) says where each kept value sat. A group is one 4-bit code,
`first | second << 2`, its two positions inside the group (0..3, first < second: the order
`mma.sp::ordered_metadata` asks for). Codes are gathered the way one register of the warp-level `mma.sp`
instruction carries them: a word covers rows r and r + 8 of a 16-row block and four consecutive groups (16
logical columns) of both. Word (mb, kb, g), at flat index (mb * K/16 + kb) * 8 + g, holds

    bits 4c .. 4c+3        the code of group 4kb + c in row 16mb + g        (c = 0 .. 3)
    bits 16 + 4c .. +3     the code of group 4kb + c in row 16mb + g + 8

so the eight words of one (16-row block, 16-column block) pair are the eight groups of lanes' registers of one
fp16/bf16 m16n8k16 instruction (lane 4g + selector gives word g), and an m16n8k32 (fp16/bf16) instruction takes two
consecutive kb with the same g, one per lane of a lane pair. 8-bit sparse wgmma (m64nNk64) wants one row's 32
columns per lane instead: its kernel joins one row's halves of two such words (sp24_wgmma_sp.cu, sp24w_load_meta).
M must be a multiple of 16 and K of 64, which the family's shapes guarantee.
"""

from __future__ import annotations

import numpy as np

from sparseditto.tools.dtypes import to_float64, to_storage

GROUP = 4  # logical columns per 2:4 group
KEPT = 2  # values kept per group
ROW_BLOCK = 16  # rows sharing one set of metadata words
COLUMN_BLOCK = 16  # logical columns one word covers per row
# the storage type of a compressed value array tells its element type (the family's input dtypes)
_DTYPE_BY_STORAGE = {np.dtype(np.float16): "fp16", np.dtype(np.uint16): "bf16", np.dtype(np.uint8): "fp8_e4m3"}


def check_shape(M: int, K: int) -> None:
    if M % ROW_BLOCK or K % 64 or M < 1 or K < 1:
        raise ValueError(f"a 2:4 matrix here is M x K with M a positive multiple of {ROW_BLOCK} and K of 64 (got {M} x {K})")


def kept_positions(mask: np.ndarray) -> np.ndarray:
    """(M, K/4, 2) positions 0..3 of each group's two kept entries, increasing; `mask` must keep exactly two of
    every aligned group of four."""
    M, K = mask.shape
    groups = mask.reshape(M, K // GROUP, GROUP)
    counts = groups.sum(axis=2)
    if (counts != KEPT).any():
        row, group = (int(i) for i in np.argwhere(counts != KEPT)[0])
        raise ValueError(f"row {row}, group {group} (columns {GROUP * group}..{GROUP * group + 3}) keeps "
                         f"{int(counts[row, group])} entries; 2:4 keeps exactly 2 of every 4")
    # a stable sort of 'not kept' puts the two kept positions first, in increasing order
    return np.argsort(~groups, axis=2, kind="stable")[:, :, :KEPT]


def pack_meta(positions: np.ndarray) -> np.ndarray:
    """The A_meta words (int32 bits, flat) of (M, K/4, 2) kept positions."""
    M, groups, _ = positions.shape
    check_shape(M, groups * GROUP)
    codes = (positions[:, :, 0] | (positions[:, :, 1] << 2)).astype(np.uint64)
    # (mb, half, g, kb, c): row 16mb + 8half + g, group 4kb + c
    codes = codes.reshape(M // ROW_BLOCK, 2, 8, groups // 4, 4)
    shifts = (16 * np.arange(2)[:, None, None, None] + 4 * np.arange(4)[None, None, None, :]).astype(np.uint64)
    words = (codes << shifts).sum(axis=(1, 4), dtype=np.uint64)  # (mb, g, kb): disjoint bits, so sum == or
    return words.transpose(0, 2, 1).reshape(-1).astype(np.uint32).view(np.int32)


def unpack_meta(meta: np.ndarray, M: int, K: int) -> np.ndarray:
    """(M, K/4, 2) kept positions from A_meta words; refuses codes with equal or decreasing positions."""
    check_shape(M, K)
    if meta.size != M * K // 32:
        raise ValueError(f"A_meta has {meta.size} words; an {M} x {K} matrix has {M * K // 32}")
    words = np.asarray(meta).reshape(M // ROW_BLOCK, K // COLUMN_BLOCK, 8).view(np.uint32).astype(np.uint64)
    shifts = (16 * np.arange(2)[:, None] + 4 * np.arange(4)[None, :]).astype(np.uint64)  # (half, c)
    codes = (words[:, :, :, None, None] >> shifts) & np.uint64(0xF)  # (mb, kb, g, half, c)
    codes = codes.transpose(0, 3, 2, 1, 4).reshape(M, K // GROUP).astype(np.int64)
    first, second = codes & 3, codes >> 2
    if (first >= second).any():
        row, group = (int(i) for i in np.argwhere(first >= second)[0])
        raise ValueError(f"A_meta: row {row}, group {group} has the code {int(codes[row, group]):#x}; "
                         "a code names two different positions, the lower first")
    return np.stack([first, second], axis=2)


def compress(dense: np.ndarray, mask: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(A_values in `dtype`'s storage, A_meta) of the entries of `dense` that `mask` keeps (2 of every 4)."""
    M, K = dense.shape
    check_shape(M, K)
    positions = kept_positions(mask)
    kept = np.take_along_axis(dense.reshape(M, K // GROUP, GROUP), positions, axis=2).reshape(M, K // 2)
    return to_storage(kept, dtype), pack_meta(positions)


def dense_from_positions(values: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The float64 M x K matrix with `values` (float64, M x K/2) at the kept positions and zeros elsewhere."""
    M, groups, _ = positions.shape
    dense = np.zeros((M, groups, GROUP))
    np.put_along_axis(dense, positions, values.reshape(M, groups, KEPT), axis=2)
    return dense.reshape(M, groups * GROUP)


def decompress(values: np.ndarray, meta: np.ndarray, M: int, K: int) -> np.ndarray:
    """The dense float64 M x K matrix of a compressed one. `values` (M x K/2) in its storage type (float16 for
    fp16, uint16 bits for bf16, uint8 bits for fp8 e4m3, as in Problem.inputs) or already widened to float32 or
    float64."""
    values = np.asarray(values)
    if values.size != M * K // 2:
        raise ValueError(f"A_values has {values.size} values; an {M} x {K} 2:4 matrix keeps {M * K // 2}")
    if values.dtype in (np.float32, np.float64):
        wide = values.astype(np.float64)
    elif values.dtype in _DTYPE_BY_STORAGE:
        wide = to_float64(values, _DTYPE_BY_STORAGE[values.dtype])
    else:
        raise ValueError(f"A_values of storage type {values.dtype} is none of this family's: "
                         f"{', '.join(str(d) for d in _DTYPE_BY_STORAGE)}, or float32/float64")
    return dense_from_positions(wide.reshape(M, K // 2), unpack_meta(meta, M, K))
