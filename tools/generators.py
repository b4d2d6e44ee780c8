"""Seeded generators of SuiteSparse-like matrices, one per structure class, for suites that fill an H200.

Every generator is `(rng, scale, **params) -> scipy.sparse.csr_matrix`: `scale` is the number of nonzeros
wanted (reached to within a few per cent; the grid classes round to a whole grid), the result is canonical
CSR (int32 indices, columns sorted and distinct in every row, float32 values in [-1, 1), symmetric values
for a symmetric class). Everything is vectorised NumPy/SciPy: the work is a few passes over the nonzeros
(a 30M-nonzero matrix in about a second or three), never a loop over rows.

`size(cls, scale, **params)` gives (rows, cols, nonzeros) from the parameters alone, without generating
(exact for the grid classes, an estimate for the random ones), so a suite can be sized and filtered cheaply.
The classes, each with the real matrices it imitates and the feature a kernel would exploit:
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from sparseditto.tools.structure import H200_L2_BYTES, spmv_bytes
WEB_COPY_NEW = 1.0  # share of a web page's copied links that it did not have (measured)


# ----------------------------------------------------------------------------------------------- helpers


def _indptr(lengths: np.ndarray) -> np.ndarray:
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return indptr


def _index_dtype(*bounds: int) -> type:
    return np.int32 if max(bounds) < 2**31 else np.int64


def _row_of_entries(indptr: np.ndarray) -> np.ndarray:
    """The row of every nonzero of a CSR matrix, in storage order."""
    return np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))


def _csr(indptr: np.ndarray, indices: np.ndarray, shape: tuple[int, int], data: np.ndarray | None = None) -> sp.csr_matrix:
    """A csr_matrix of arrays already canonical (sorted, distinct columns per row), int32 where they fit."""
    itype = _index_dtype(int(indptr[-1]), *shape)
    if data is None:
        data = np.empty(len(indices), dtype=np.float32)
    matrix = sp.csr_matrix((data, indices.astype(itype, copy=False), indptr.astype(itype, copy=False)), shape=shape)
    matrix.has_sorted_indices = True
    matrix.has_canonical_format = True
    return matrix


def _canonical(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    """Canonical CSR of a list of (row, column) pairs in any order, duplicates merged: SciPy's counting sort
    by row and a sort within each row (linear in the nonzeros, no global sort). Values are left to fill."""
    itype = _index_dtype(len(rows), *shape)
    coo = sp.coo_matrix((np.ones(len(rows), dtype=np.int8), (rows.astype(itype, copy=False), cols.astype(itype, copy=False))),
                        shape=shape)
    matrix = coo.tocsr()  # sums duplicates, sorts every row
    matrix.sum_duplicates()
    return matrix


def _distinct_sorted_rows(lengths: np.ndarray, lo: np.ndarray | int, width: np.ndarray | int,
                          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """CSR (indptr, indices) where row i holds lengths[i] <= width[i] distinct sorted columns in
    [lo[i], lo[i] + width[i]): draw lengths[i] values in [0, width - length], sort them within the row (SciPy,
    per row) and add 0, 1, 2, ...: sorted and distinct without a global sort or a duplicate pass."""
    lengths = np.asarray(lengths, dtype=np.int64)
    indptr = _indptr(lengths)
    nnz = int(indptr[-1])
    span = np.repeat(np.broadcast_to(np.asarray(width, dtype=np.int64) - lengths + 1, lengths.shape), lengths)
    draws = rng.random(nnz)
    draws *= span
    del span
    cols = draws.astype(np.int64)
    del draws
    holder = sp.csr_matrix((np.empty(nnz, dtype=np.float32), cols, indptr), shape=(len(lengths), int(cols.max(initial=0)) + 1))
    holder.sort_indices()
    cols = holder.indices.astype(np.int64, copy=False)
    del holder
    starts = np.repeat(indptr[:-1], lengths)
    cols += np.arange(nnz, dtype=np.int64)
    cols -= starts
    del starts
    cols += np.repeat(np.broadcast_to(np.asarray(lo, dtype=np.int64), lengths.shape), lengths)
    return indptr, cols


def _fill_random(matrix: sp.csr_matrix, rng: np.random.Generator) -> sp.csr_matrix:
    """Values uniform in [-1, 1), float32."""
    values = rng.random(matrix.nnz, dtype=np.float32)
    values *= 2
    values -= 1
    matrix.data = values
    return matrix


def _fill_symmetric(matrix: sp.csr_matrix, rng: np.random.Generator) -> sp.csr_matrix:
    """Values in [-1, 1), float32, equal at (i, j) and (j, i): a seeded hash of the unordered pair (no transpose)."""
    M, K = matrix.shape
    seed = np.uint64(int(rng.integers(0, 2**63)))
    rows = _row_of_entries(matrix.indptr).astype(np.uint64)
    cols = matrix.indices.astype(np.uint64)
    lo = np.minimum(rows, cols)
    np.maximum(rows, cols, out=rows)
    del cols
    lo *= np.uint64(max(M, K))
    lo += rows
    del rows
    x = lo
    x ^= seed  # splitmix64 finaliser
    x *= np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    x >>= np.uint64(40)  # 24 bits: exact in float32
    values = x.astype(np.float32)
    del x
    values *= np.float32(2.0**-23)
    values -= 1
    matrix.data = values
    return matrix


def _keep_symmetric(rows: np.ndarray, cols: np.ndarray, share: float, rng: np.random.Generator) -> np.ndarray:
    """A mask keeping about `share` of the pairs, the same decision for (i, j) and (j, i): a seeded hash."""
    if share >= 1.0:
        return np.ones(len(rows), dtype=bool)
    seed = np.uint64(int(rng.integers(0, 2**63)))
    a = rows.astype(np.uint64)
    b = cols.astype(np.uint64)
    x = np.minimum(a, b) * np.uint64(0xD6E8FEB86659FD93) + np.maximum(a, b)
    del a, b
    x ^= seed
    x *= np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(29)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(32)
    return (x >> np.uint64(40)) < np.uint64(int(share * (1 << 24)))


def _stencil_offsets(dim: int, points: int) -> np.ndarray:
    """The offsets (points x dim) of a 2D 5/9-point or a 3D 7/19/27-point stencil."""
    full = np.array(np.meshgrid(*[[-1, 0, 1]] * dim, indexing="ij")).reshape(dim, -1).T
    taxicab = np.abs(full).sum(axis=1)
    allowed = {(2, 5): 1, (2, 9): 2, (3, 7): 1, (3, 19): 2, (3, 27): 3}
    if (dim, points) not in allowed:
        raise ValueError(f"a {dim}D stencil has {' or '.join(str(p) for d, p in allowed if d == dim)} points, not {points}")
    return full[taxicab <= allowed[(dim, points)]]


def _grid_nnz(shape: tuple[int, ...], offsets: np.ndarray) -> int:
    """Nonzeros of a stencil on a grid: each offset couples prod(n_k - |o_k|) points."""
    return int(sum(math.prod(max(n - abs(int(o)), 0) for n, o in zip(shape, offset)) for offset in offsets))


def _grid_csr(shape: tuple[int, ...], offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR (indptr, indices) of a stencil on a grid (C order): a point's neighbours in the grid. Offsets are
    taken in order of their flat offset, so every row comes out sorted; one pass per grid dimension."""
    dim, N = len(shape), math.prod(shape)
    strides = np.array([math.prod(shape[k + 1:]) for k in range(dim)], dtype=np.int64)
    flat = offsets @ strides
    order = np.argsort(flat, kind="stable")
    offsets, flat = offsets[order], flat[order]
    valid = np.ones(tuple(shape) + (len(offsets),), dtype=bool)
    for k, n in enumerate(shape):
        coord = np.arange(n).reshape([-1 if j == k else 1 for j in range(dim)] + [1])
        valid &= (coord + offsets[:, k] >= 0) & (coord + offsets[:, k] < n)
    valid = valid.reshape(N, len(offsets))
    itype = _index_dtype(N + 1)
    cols = np.arange(N, dtype=itype)[:, None] + flat.astype(itype)[None, :]
    indices = cols[valid]
    del cols
    return _indptr(valid.sum(axis=1)), indices


def _power_law_lengths(count: int, mean: float, exponent: float, cap: int, rng: np.random.Generator,
                       minimum: int = 1) -> np.ndarray:
    """Row lengths with P(length = d) ~ d^-exponent, at least `minimum`, at most `cap`, mean about `mean`."""
    raw = rng.pareto(max(exponent - 1.0, 0.05), size=count) + 1.0
    factor = mean
    for _ in range(6):  # the cap bends the mean: rescale a few times
        lengths = np.clip(np.floor(raw * factor), minimum, cap)
        got = float(lengths.mean()) if count else mean
        if abs(got - mean) < 0.005 * mean or got <= 0:
            break
        factor *= mean / got
    return lengths.astype(np.int64)


def _lognormal_lengths(count: int, mean: float, sigma: float, cap: int, rng: np.random.Generator) -> np.ndarray:
    """Uneven row lengths: lognormal with the given mean (coefficient of variation sqrt(e^sigma^2 - 1)), 1..cap."""
    mu = math.log(mean) - sigma * sigma / 2
    return np.clip(np.rint(rng.lognormal(mu, sigma, size=count)), 1, cap).astype(np.int64)


class _RankLaw:
    """Node i drawn with probability ~ (i + x0)^-alpha (a rank-size law: degrees P(d) ~ d^-(1 + 1/alpha)),
    sampled by the inverse of the continuous CDF (no table, no search); x0 caps the largest expected degree."""

    def __init__(self, n: int, exponent: float, draws: int, max_degree: float) -> None:
        self.n, self.alpha = n, 1.0 / max(exponent - 1.0, 1e-3)
        lo, hi = 1e-3, 1e12  # bisection on log x0: the first node's share of `draws` equals max_degree
        for _ in range(100):
            mid = math.sqrt(lo * hi)
            if draws * self._share0(mid) > max_degree:
                lo = mid
            else:
                hi = mid
        self.x0 = hi

    def _g(self, x: Any, x0: float) -> Any:
        g = 1.0 - self.alpha
        return np.log(x + x0) if abs(g) < 1e-9 else (x + x0) ** g / g

    def _share0(self, x0: float) -> float:
        return float((self._g(1.0, x0) - self._g(0.0, x0)) / (self._g(float(self.n), x0) - self._g(0.0, x0)))

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        g, x0 = 1.0 - self.alpha, self.x0
        a, b = self._g(0.0, x0), self._g(float(self.n), x0)
        u = rng.random(size)
        u *= b - a
        u += a
        if abs(g) < 1e-9:
            np.exp(u, out=u)
        else:
            u *= g
            np.power(u, 1.0 / g, out=u)
        u -= x0
        return np.clip(u, 0, self.n - 1).astype(np.int64)


def _local_offsets(size: int, median: float, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Signed offsets from the diagonal, at least 1 in magnitude, lognormal (most small, a long tail)."""
    magnitude = np.ceil(rng.lognormal(math.log(median), sigma, size=size)).astype(np.int64)
    sign = rng.integers(0, 2, size=size, dtype=np.int8) * 2 - 1
    return magnitude * sign


# ----------------------------------------------------------------------------------------------- classes


def _stencil_2d_dims(scale: int, points: int = 5) -> tuple[int, ...]:
    n = max(3, round(math.sqrt(scale / points)))
    return (n, n)


def stencil_2d(rng: np.random.Generator, scale: int, points: int = 5) -> sp.csr_matrix:
    """2D Poisson/diffusion on a square grid, 5- or 9-point (SuiteSparse 2D PDE, Dubcova, ecology): every row
    one of few fixed diagonals, short boundary rows: diagonal (DIA) storage, x reuse between rows."""
    shape = _stencil_2d_dims(scale, points)
    indptr, indices = _grid_csr(shape, _stencil_offsets(2, points))
    N = math.prod(shape)
    return _fill_symmetric(_csr(indptr, indices, (N, N)), rng)


def _stencil_3d_dims(scale: int, points: int = 7) -> tuple[int, ...]:
    n = max(3, round((scale / points) ** (1 / 3)))
    return (n, n, n)


def stencil_3d(rng: np.random.Generator, scale: int, points: int = 7) -> sp.csr_matrix:
    """3D Laplacian on a cube, 7-, 19- or 27-point (atmosmodd, 3D CFD/heat): a fixed set of diagonals spread
    over three distances (1, n, n^2): DIA or plane-blocked storage; 27-point rows share 3x3 column runs."""
    shape = _stencil_3d_dims(scale, points)
    indptr, indices = _grid_csr(shape, _stencil_offsets(3, points))
    N = math.prod(shape)
    return _fill_symmetric(_csr(indptr, indices, (N, N)), rng)


def _fem_node_degree(dim: int, drop: float) -> float:
    return 1 + (3**dim - 1) * (1 - drop)


def _fem_dims(scale: int, block: int = 3, dim: int = 3, drop: float = 0.25) -> tuple[int, ...]:
    nodes = scale / (block * block * _fem_node_degree(dim, drop))
    n = max(3, round(nodes ** (1 / dim)))
    return (n,) * dim


def fem_blocks(rng: np.random.Generator, scale: int, block: int = 3, dim: int = 3, drop: float = 0.25) -> sp.csr_matrix:
    """Finite elements with `block` unknowns per node (3..24: displacements, rotations, multiphysics), nodes on a
    2D/3D mesh whose neighbour links are thinned at random (bcsstk*, ldoor, audikw_1, Serena): dense
    block x block blocks on a block pattern: BSR, tensor cores for the blocks."""
    if not 1 <= block <= 64 or dim not in (2, 3) or not 0 <= drop < 1:
        raise ValueError("fem_blocks: block in 1..64, dim 2 or 3, drop in [0, 1)")
    shape = _fem_dims(scale, block, dim, drop)
    nodes = math.prod(shape)
    node_ptr, node_cols = _grid_csr(shape, _stencil_offsets(dim, 3**dim))
    node_rows = _row_of_entries(node_ptr)
    keep = _keep_symmetric(node_rows, node_cols, 1.0 - drop, rng) | (node_rows == node_cols)
    node_ptr = _indptr(np.add.reduceat(keep, node_ptr[:-1]) if len(keep) else np.zeros(nodes, np.int64))
    node_cols = node_cols[keep]
    del node_rows, keep
    blocks = sp.bsr_matrix((np.ones((len(node_cols), block, block), dtype=np.float32), node_cols, node_ptr),
                           shape=(nodes * block, nodes * block))
    matrix = blocks.tocsr()  # block rows in order, block columns sorted: every row sorted
    del blocks
    matrix.has_sorted_indices = True
    return _fill_symmetric(matrix, rng)


def _power_law_dims(scale: int, avg_degree: float = 16.0, **_: Any) -> int:
    return max(16, round(scale / avg_degree))


def power_law_graph(rng: np.random.Generator, scale: int, avg_degree: float = 16.0, exponent: float = 2.1,
                    max_degree: int = 4000, symmetric: bool = True) -> sp.csr_matrix:
    """Scale-free graph (Chung-Lu, degrees P(d) ~ d^-exponent, hubs of up to `max_degree`), node ids shuffled
    (com-Orkut, soc-LiveJournal, ca-*, wiki-Vote when directed): a few rows of thousands of nonzeros among
    many short or empty ones: merge-path / row splitting to balance rows."""
    N = _power_law_dims(scale, avg_degree)
    max_degree = min(max_degree, max(2, N // 4))
    edges = scale // 2 if symmetric else scale
    out_law = _RankLaw(N, exponent, scale, max_degree)
    src = out_law.sample(edges, rng)
    dst = out_law.sample(edges, rng) if symmetric else _RankLaw(N, exponent, scale, max_degree).sample(edges, rng)
    itype = _index_dtype(N)
    perm = rng.permutation(N).astype(itype)
    src, dst = perm[src], (perm if symmetric else rng.permutation(N).astype(itype))[dst]
    if symmetric:
        loop = src != dst
        src, dst = src[loop], dst[loop]
        rows, cols = np.concatenate([src, dst]), np.concatenate([dst, src])
    else:
        rows, cols = src, dst
    del src, dst
    matrix = _canonical(rows, cols, (N, N))
    return _fill_symmetric(matrix, rng) if symmetric else _fill_random(matrix, rng)


def _road_degree(keep: float, diagonals: float) -> float:
    return 4 * keep + 4 * diagonals


def _road_dims(scale: int, keep: float = 0.65, diagonals: float = 0.05, **_: Any) -> int:
    return max(3, round(math.sqrt(scale / _road_degree(keep, diagonals))))


def road_grid(rng: np.random.Generator, scale: int, keep: float = 0.65, diagonals: float = 0.05,
              permute: bool = True) -> sp.csr_matrix:
    """Road network: a 2D grid with a share of its streets kept and a few diagonals, no self loops, node ids
    shuffled (road_usa, roadNet-CA, europe_osm): 2-4 nonzeros per row, no locality left: short-row kernels, a
    reordering (RCM) to bring back a band."""
    n = _road_dims(scale, keep, diagonals)
    N = n * n
    grid = np.arange(N, dtype=_index_dtype(N + n)).reshape(n, n)
    pieces_r, pieces_c = [], []
    # streets to the right and down, diagonals down-right and down-left: (node, node + offset)
    for share, offset, starts in ((keep, 1, grid[:, :-1]), (keep, n, grid[:-1, :]),
                                  (diagonals, n + 1, grid[:-1, :-1]), (diagonals, n - 1, grid[:-1, 1:])):
        chosen = starts[rng.random(starts.shape, dtype=np.float32) < share]
        pieces_r.append(chosen)
        pieces_c.append(chosen + offset)
    del grid
    u, v = np.concatenate(pieces_r), np.concatenate(pieces_c)
    del pieces_r, pieces_c
    if permute:
        perm = rng.permutation(N).astype(u.dtype)
        u, v = perm[u], perm[v]
        del perm
    matrix = _canonical(np.concatenate([u, v]), np.concatenate([v, u]), (N, N))
    return _fill_symmetric(matrix, rng)


def _circuit_hub_lengths(N: int, dense_len: tuple[int, int]) -> tuple[int, int]:
    hi = min(dense_len[1], N - 1)
    return min(dense_len[0], hi), hi


def _circuit_dims(scale: int, row_mean: float = 5.0, dense: int = 8, dense_len: tuple[int, int] = (1000, 5000),
                  **_: Any) -> int:
    N = max(64, round(scale / row_mean))
    for _ in range(20):  # the dense rows' lengths are capped by N: settle N and them together
        lo, hi = _circuit_hub_lengths(N, dense_len)
        heavy = 2 * min(dense, N) * (lo + hi) / 2
        N = max(64, round(max(scale - heavy, scale * 0.2) / row_mean))
    return N


def circuit(rng: np.random.Generator, scale: int, row_mean: float = 5.0, dense: int = 8,
            dense_len: tuple[int, int] = (1000, 5000), far: float = 0.05) -> sp.csr_matrix:
    """Circuit simulation: a full diagonal, a few couplings per row mostly near the diagonal (structurally
    symmetric), and `dense` supply/ground nodes whose rows and columns hold thousands of nonzeros (rajat*,
    ASIC_*, G3_circuit, memchip, Freescale): split the dense rows off, short rows per thread or warp."""
    N = _circuit_dims(scale, row_mean, dense, dense_len)
    half = rng.poisson((row_mean - 1) / 2, size=N)
    src = np.repeat(np.arange(N, dtype=np.int64), half)
    dst = src + _local_offsets(len(src), 3.0, 1.5, rng)
    anywhere = rng.random(len(src)) < far
    dst[anywhere] = rng.integers(0, N, size=int(anywhere.sum()))
    del anywhere
    np.clip(dst, 0, N - 1, out=dst)
    hubs = rng.choice(N, size=min(dense, N), replace=False)
    lo, hi = _circuit_hub_lengths(N, dense_len)
    lengths = rng.integers(lo, hi + 1, size=len(hubs))
    hub_src = np.repeat(hubs.astype(np.int64), lengths)
    hub_dst = _distinct_sorted_rows(lengths, 0, N, rng)[1]
    diag = np.arange(N, dtype=np.int64)
    rows = np.concatenate([diag, src, dst, hub_src, hub_dst])
    cols = np.concatenate([diag, dst, src, hub_dst, hub_src])
    del src, dst, hub_src, hub_dst, diag
    return _fill_random(_canonical(rows, cols, (N, N)), rng)


def _band_dims(scale: int, bandwidth: int = 64, fill: float = 0.3) -> int:
    return max(2 * bandwidth + 2, round(scale / ((2 * bandwidth + 1) * fill)))


def random_band(rng: np.random.Generator, scale: int, bandwidth: int = 64, fill: float = 0.3) -> sp.csr_matrix:
    """Random nonzeros within `bandwidth` of the diagonal, each row filling about `fill` of its band (banded
    solvers, reordered meshes after RCM, the band of a Cuthill-McKee'd FEM matrix): x reads confined to a
    window (shared-memory x tiles, 16-bit column offsets), rows of similar length."""
    N = _band_dims(scale, bandwidth, fill)
    width = 2 * bandwidth + 1
    lengths = rng.binomial(width, fill, size=N).astype(np.int64)
    lo = np.clip(np.arange(N, dtype=np.int64) - bandwidth, 0, N - width)
    indptr, indices = _distinct_sorted_rows(lengths, lo, width, rng)
    return _fill_random(_csr(indptr, indices, (N, N)), rng)


def _lp_dims(scale: int, aspect: float = 4.0, row_mean: float = 12.0, linking: int = 10,
             linking_len: tuple[int, int] = (2000, 20000), slack: bool = True, **_: Any) -> tuple[int, int]:
    heavy = linking * (linking_len[0] + linking_len[1]) / 2
    M = max(16, round(max(scale - heavy, 0.5 * scale) / (row_mean + (1 if slack else 0))))
    return M, max(M + 16, round(aspect * M))


def lp_rectangular(rng: np.random.Generator, scale: int, aspect: float = 4.0, row_mean: float = 12.0,
                   row_sigma: float = 1.0, linking: int = 10, linking_len: tuple[int, int] = (2000, 20000),
                   scatter: float = 0.1, slack: bool = True, transpose: bool = False) -> sp.csr_matrix:
    """Linear program constraint matrix, wide (K = aspect * M): uneven rows (lognormal lengths) on a staircase
    of column windows, a few linking rows of thousands of nonzeros, an identity of slack columns (greenbea,
    lp_*, rail4284, stormG2, pds-*); `transpose` gives the tall least-squares shape: long x, short y,
    row-length balancing, x reuse only within a window."""
    M, K = _lp_dims(scale, aspect, row_mean, linking, linking_len, slack)
    Ks = K - M if slack else K  # structural columns
    lengths = _lognormal_lengths(M, row_mean, row_sigma, Ks, rng)
    links = rng.choice(M, size=min(linking, M), replace=False)
    lengths[links] = rng.integers(min(linking_len[0], Ks), min(linking_len[1], Ks) + 1, size=len(links))
    scattered = rng.binomial(lengths, scatter)
    scattered[links] = 0
    local = lengths - scattered
    width = np.minimum(np.maximum(4 * local, 64), Ks)
    width[links] = Ks
    home = (np.arange(M, dtype=np.int64) * Ks) // M
    lo = np.clip(home - width // 2, 0, Ks - width)
    indptr, cols = _distinct_sorted_rows(local, lo, width, rng)
    rows = _row_of_entries(indptr)
    extra_rows = np.repeat(np.arange(M, dtype=np.int64), scattered)
    parts_r, parts_c = [rows, extra_rows], [cols, rng.integers(0, Ks, size=len(extra_rows))]
    if slack:
        parts_r.append(np.arange(M, dtype=np.int64))
        parts_c.append(np.arange(Ks, K, dtype=np.int64))
    del rows, cols, extra_rows
    matrix = _canonical(np.concatenate(parts_r), np.concatenate(parts_c), (M, K))
    del parts_r, parts_c
    if transpose:
        matrix = matrix.T.tocsr()  # CSC -> CSR: sorted, distinct
        matrix.sort_indices()
    return _fill_random(matrix, rng)


def _web_dims(scale: int, avg_degree: float = 12.0, **_: Any) -> int:
    return max(64, round(scale / avg_degree))


def web_graph(rng: np.random.Generator, scale: int, avg_degree: float = 12.0, exponent: float = 2.1,
              max_degree: int = 3000, local: float = 0.7, copy: float = 0.5, copy_frac: float = 0.6,
              dangling: float = 0.1) -> sp.csr_matrix:
    """Web crawl in URL order: power-law out-degrees, links mostly within the same site (near the diagonal)
    or to popular pages (power-law in-degrees), rows that copy part of a neighbouring row's links, pages with
    no links (web-Google, wb-edu, uk-2002, in-2004): neighbouring rows share columns (row groups, x reuse
    in cache), dangling empty rows, long rows to split."""
    N = _web_dims(scale, avg_degree)
    max_degree = min(max_degree, max(2, N // 4))
    growth = 1 + copy * copy_frac * (1 - dangling) * WEB_COPY_NEW  # copied links, less those already there
    lengths = _power_law_lengths(N, avg_degree / ((1 - dangling) * growth), exponent, max_degree, rng)
    lengths[rng.random(N) < dangling] = 0
    # links within the site: distinct columns in a window around the page; the others to popular pages
    near = rng.binomial(lengths, local)
    width = np.minimum(np.maximum(4 * near, 64), N)
    near_ptr, near_cols = _distinct_sorted_rows(near, np.clip(np.arange(N) - width // 2, 0, N - width), width, rng)
    far_ptr = _indptr(lengths - near)
    far_cols = rng.permutation(N)[_RankLaw(N, exponent, int(far_ptr[-1]), max_degree).sample(int(far_ptr[-1]), rng)]
    # copying: a page takes about copy_frac of the links of a page just above it
    copier = np.flatnonzero((rng.random(N) < copy) & (lengths > 0))
    source = np.maximum(copier - rng.geometric(0.5, size=len(copier)), 0)
    parts_r, parts_c = [_row_of_entries(near_ptr), _row_of_entries(far_ptr)], [near_cols, far_cols]
    for ptr, cols in ((near_ptr, near_cols), (far_ptr, far_cols)):
        counts = ptr[source + 1] - ptr[source]
        take = np.repeat(ptr[source] - _indptr(counts)[:-1], counts) + np.arange(int(counts.sum()), dtype=np.int64)
        kept = rng.random(len(take), dtype=np.float32) < copy_frac
        parts_r.append(np.repeat(copier, counts)[kept])
        parts_c.append(cols[take[kept]])
    del near_cols, far_cols, take, kept
    matrix = _canonical(np.concatenate(parts_r), np.concatenate(parts_c), (N, N))
    return _fill_random(matrix, rng)


def _block_sizes(scale: int, block: tuple[int, int], rng: np.random.Generator | None) -> np.ndarray:
    lo, hi = block
    mean_sq = (hi * (hi + 1) * (2 * hi + 1) - (lo - 1) * lo * (2 * lo - 1)) / 6 / (hi - lo + 1)
    if rng is None:  # the estimate: the expected count of blocks, all of the mean size
        return np.full(max(1, round(scale / mean_sq)), (lo + hi) / 2)
    sizes = rng.integers(lo, hi + 1, size=int(1.5 * scale / mean_sq) + 8)
    total = np.cumsum(sizes.astype(np.int64) ** 2)
    cut = int(np.searchsorted(total, scale))  # total[cut] >= scale: stop before or after it, whichever is nearer
    cut += 1 if cut == 0 or total[cut] - scale < scale - total[cut - 1] else 0
    return sizes[:cut].astype(np.int64)


def block_diagonal_dense(rng: np.random.Generator, scale: int, block: tuple[int, int] = (64, 512),
                         fill: float = 1.0) -> sp.csr_matrix:
    """Dense (or `fill`-dense) diagonal blocks of random sizes (quantum chemistry qc*, mbeacxc, block-Jacobi
    preconditioners, independent small dense systems): long dense row segments: dense GEMM tiles per block,
    tensor cores, full reuse of x within a block."""
    sizes = _block_sizes(scale, block, rng)
    N = int(sizes.sum())
    lengths = np.repeat(sizes, sizes)
    first = np.repeat(_indptr(sizes)[:-1], sizes)  # each row's block starts at this column
    indptr = _indptr(lengths)
    itype = _index_dtype(N + 1)
    indices = np.arange(int(indptr[-1]), dtype=np.int64)
    indices -= np.repeat(indptr[:-1] - first, lengths)
    indices = indices.astype(itype)
    if fill < 1.0:
        keep = rng.random(len(indices)) < fill
        indices = indices[keep]
        indptr = _indptr(np.add.reduceat(keep, indptr[:-1].astype(np.int64)) if len(keep) else lengths * 0)
    return _fill_random(_csr(indptr, indices, (N, N)), rng)


def _empty_dims(scale: int, empty: float = 0.7, row_mean: float = 8.0, aspect: float = 1.0, **_: Any) -> tuple[int, int]:
    M = max(16, round(scale / row_mean / (1 - empty)))
    return M, max(16, round(aspect * M))


def empty_rows_mix(rng: np.random.Generator, scale: int, empty: float = 0.7, row_mean: float = 8.0,
                   exponent: float = 2.5, max_len: int = 2000, aspect: float = 1.0, run: int = 1) -> sp.csr_matrix:
    """Most rows empty (in runs of `run` rows), the others of power-law lengths with random columns (p2p-Gnutella,
    LFAT5_hypersparse, unused nodes of a model, a submatrix of a larger system): skip empty rows (a compressed
    row list), balance by nonzeros rather than rows."""
    M, K = _empty_dims(scale, empty, row_mean, aspect)
    runs = -(-M // run)
    filled = np.repeat(rng.random(runs) >= empty, run)[:M]
    lengths = np.zeros(M, dtype=np.int64)
    lengths[filled] = _power_law_lengths(int(filled.sum()), row_mean, exponent, min(max_len, K), rng)
    indptr, indices = _distinct_sorted_rows(lengths, 0, K, rng)
    return _fill_random(_csr(indptr, indices, (M, K)), rng)


def _small_dims(scale: int, row_mean: float = 8.0, aspect: float = 1.0, **_: Any) -> tuple[int, int]:
    M = max(16, round(scale / row_mean))
    return M, max(16, round(aspect * M))


def small_l2(rng: np.random.Generator, scale: int, row_mean: float = 8.0, row_sigma: float = 0.8,
             local: float = 0.8, aspect: float = 1.0) -> sp.csr_matrix:
    """A matrix whose SpMV data fits in the H200's 60 MiB L2: uneven short rows near the diagonal with some
    scattered couplings (west0067, bayer10, bcsstk13, chemical process and economic models): one launch, no
    streaming; launch latency and the tail matter more than bandwidth."""
    M, K = _small_dims(scale, row_mean, aspect)
    if spmv_bytes(M, K, scale) > H200_L2_BYTES:
        raise ValueError(f"small_l2: {scale} nonzeros in {M} x {K} do not fit in the {H200_L2_BYTES >> 20} MiB L2")
    lengths = _lognormal_lengths(M, row_mean, row_sigma, K, rng)
    near = rng.binomial(lengths, local)
    width = np.minimum(np.maximum(4 * near, 16), K)
    lo = np.clip((np.arange(M, dtype=np.int64) * K) // M - width // 2, 0, K - width)
    near_ptr, near_cols = _distinct_sorted_rows(near, lo, width, rng)
    far_rows = np.repeat(np.arange(M, dtype=np.int64), lengths - near)
    rows = np.concatenate([_row_of_entries(near_ptr), far_rows])
    cols = np.concatenate([near_cols, rng.integers(0, K, size=len(far_rows))])
    return _fill_random(_canonical(rows, cols, (M, K)), rng)


# ----------------------------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class StructureClass:
    """A generator and what is known of its matrices before generating them."""

    name: str
    build: Callable[..., sp.csr_matrix]
    size: Callable[..., tuple[int, int, int]]  # (scale, **params) -> (rows, cols, nonzeros), estimated
    symmetric: Callable[[dict[str, Any]], bool] = lambda params: False

    @property
    def doc(self) -> str:
        """Its one-paragraph description: what it imitates and the feature a kernel would exploit."""
        return " ".join((self.build.__doc__ or "").split())


def _grid_size(dims: Callable[..., tuple[int, ...]], dim: int) -> Callable[..., tuple[int, int, int]]:
    def size(scale: int, points: int = 5 if dim == 2 else 7) -> tuple[int, int, int]:
        shape = dims(scale, points)
        N = math.prod(shape)
        return N, N, _grid_nnz(shape, _stencil_offsets(dim, points))
    return size


def _fem_size(scale: int, block: int = 3, dim: int = 3, drop: float = 0.25) -> tuple[int, int, int]:
    shape = _fem_dims(scale, block, dim, drop)
    full = _grid_nnz(shape, _stencil_offsets(dim, 3**dim))
    nodes = math.prod(shape)
    N = nodes * block
    return N, N, round((nodes + (full - nodes) * (1 - drop)) * block * block)


def _power_law_size(scale: int, avg_degree: float = 16.0, symmetric: bool = True, **_: Any) -> tuple[int, int, int]:
    N = _power_law_dims(scale, avg_degree)
    return N, N, round(scale * 0.97)  # duplicate edges among the hubs merge


def _road_size(scale: int, keep: float = 0.65, diagonals: float = 0.05, **_: Any) -> tuple[int, int, int]:
    n = _road_dims(scale, keep, diagonals)
    return n * n, n * n, round(2 * (2 * n * (n - 1) * keep + 2 * (n - 1) ** 2 * diagonals))


def _circuit_size(scale: int, row_mean: float = 5.0, dense: int = 8, dense_len: tuple[int, int] = (1000, 5000),
                  **_: Any) -> tuple[int, int, int]:
    N = _circuit_dims(scale, row_mean, dense, dense_len)
    lo, hi = _circuit_hub_lengths(N, dense_len)
    # mirrored couplings meet ones drawn the other way: 2.5% of the local entries merge per coupling per row
    local = N * (row_mean - 1) * (1 - 0.025 * (row_mean - 1))
    return N, N, round(N + local + 2 * min(dense, N) * (lo + hi) / 2)


def _band_size(scale: int, bandwidth: int = 64, fill: float = 0.3) -> tuple[int, int, int]:
    N = _band_dims(scale, bandwidth, fill)
    return N, N, round(N * (2 * bandwidth + 1) * fill)


def _lp_size(scale: int, aspect: float = 4.0, row_mean: float = 12.0, linking: int = 10,
             linking_len: tuple[int, int] = (2000, 20000), slack: bool = True, transpose: bool = False,
             **_: Any) -> tuple[int, int, int]:
    M, K = _lp_dims(scale, aspect, row_mean, linking, linking_len, slack)
    Ks = K - M if slack else K
    nnz = round(M * row_mean + min(linking, M) * (min(linking_len[0], Ks) + min(linking_len[1], Ks)) / 2
                + (M if slack else 0))
    return (K, M, nnz) if transpose else (M, K, nnz)


def _web_size(scale: int, avg_degree: float = 12.0, **_: Any) -> tuple[int, int, int]:
    N = _web_dims(scale, avg_degree)
    return N, N, round(N * avg_degree)


def _block_size(scale: int, block: tuple[int, int] = (64, 512), fill: float = 1.0) -> tuple[int, int, int]:
    sizes = _block_sizes(scale, block, None)
    N = round(float(sizes.sum()))
    return N, N, round(scale * fill)


def _empty_size(scale: int, empty: float = 0.7, row_mean: float = 8.0, aspect: float = 1.0, **_: Any) -> tuple[int, int, int]:
    M, K = _empty_dims(scale, empty, row_mean, aspect)
    return M, K, round(M * (1 - empty) * row_mean)


def _small_size(scale: int, row_mean: float = 8.0, aspect: float = 1.0, **_: Any) -> tuple[int, int, int]:
    M, K = _small_dims(scale, row_mean, aspect)
    return M, K, round(M * row_mean)


CLASSES: dict[str, StructureClass] = {c.name: c for c in (
    StructureClass("stencil_2d", stencil_2d, _grid_size(_stencil_2d_dims, 2), lambda p: True),
    StructureClass("stencil_3d", stencil_3d, _grid_size(_stencil_3d_dims, 3), lambda p: True),
    StructureClass("fem_blocks", fem_blocks, _fem_size, lambda p: True),
    StructureClass("power_law_graph", power_law_graph, _power_law_size, lambda p: bool(p.get("symmetric", True))),
    StructureClass("road_grid", road_grid, _road_size, lambda p: True),
    StructureClass("circuit", circuit, _circuit_size),
    StructureClass("random_band", random_band, _band_size),
    StructureClass("lp_rectangular", lp_rectangular, _lp_size),
    StructureClass("web_graph", web_graph, _web_size),
    StructureClass("block_diagonal_dense", block_diagonal_dense, _block_size),
    StructureClass("empty_rows_mix", empty_rows_mix, _empty_size),
    StructureClass("small_l2", small_l2, _small_size),
)}

__doc__ += "".join(f"- {c.name}: {c.doc}\n" for c in CLASSES.values())


def generate(cls: str, scale: int, seed: int, **params: Any) -> sp.csr_matrix:
    """The matrix of class `cls` at `scale` nonzeros from `seed` (the same seed, the same matrix)."""
    if cls not in CLASSES:
        raise ValueError(f"no structure class {cls!r}; known: {', '.join(CLASSES)}")
    return CLASSES[cls].build(np.random.default_rng(seed), int(scale), **params)


def size(cls: str, scale: int, **params: Any) -> tuple[int, int, int]:
    """(rows, cols, nonzeros) of a class's matrix at `scale` from the parameters alone (nothing generated)."""
    if cls not in CLASSES:
        raise ValueError(f"no structure class {cls!r}; known: {', '.join(CLASSES)}")
    return CLASSES[cls].size(int(scale), **params)
