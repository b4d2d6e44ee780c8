"""Input values that coarse arithmetic cannot hide in, and the bound each output element must meet.

Uniform values in [-1, 1) give every term the same scale, so dropping small products, flushing subnormals or
accumulating in a cheaper type than promised all stay inside a norm-wise tolerance. Here runs of consecutive
elements get their own power-of-two scale (most at 1, some far above or below, a few in the type's subnormal
range), signs are random, and some trials carry IEEE special values. Each output element is then held to the
error that its own terms allow in the promised accumulation type (`element_bound`), and to IEEE semantics where
the exact result is NaN or infinite (`element_ok`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import ml_dtypes
import numpy as np

from sparseditto.tools import chunks
from sparseditto.tools.dtypes import dtype

# the largest |exponent| of a run's scale: the product of two such values stays far inside the type's range
_SPREAD = {1: 2, 2: 4, 4: 8}
_RUN_LENGTH = 64  # runs are 1.._RUN_LENGTH elements long: rows and tiles of one scale, mixed with others


@dataclass(frozen=True)
class Numerics:
    """What the bound of a value type needs: unit roundoff, smallest normal and subnormal, largest finite."""

    unit_roundoff: float
    smallest_normal: float
    smallest_subnormal: float
    largest: float
    has_inf: bool
    has_nan: bool


@cache
def numerics(name: str) -> Numerics:
    """Cached: asked for by every draw, every bound and every output judged."""
    logical = dtype(name).logical
    info = ml_dtypes.finfo(logical)
    return Numerics(unit_roundoff=float(info.eps) / 2, smallest_normal=float(info.smallest_normal),
                    smallest_subnormal=float(info.smallest_subnormal), largest=float(info.max),
                    has_inf=bool(np.isinf(np.array(np.inf).astype(logical))),
                    has_nan=bool(np.isnan(np.array(np.nan).astype(logical))))


def _run_lengths(rng: np.random.Generator, size: int) -> np.ndarray:
    """Lengths of the runs that share a power of two, just enough of them to cover `size` values: drawn in
    batches of a quarter more than the mean length predicts, so that a large array costs about one batch."""
    batch = 5 * size // (2 * (_RUN_LENGTH + 1)) + 16
    lengths = rng.integers(1, _RUN_LENGTH + 1, size=batch)
    while lengths.sum() < size:
        lengths = np.concatenate([lengths, rng.integers(1, _RUN_LENGTH + 1, size=batch)])
    return lengths[:int(np.searchsorted(np.cumsum(lengths), size)) + 1]


def draw_values(rng: np.random.Generator, size: int, name: str, specials: bool = False) -> np.ndarray:
    """`size` float64 values for a float type `name` (round them with `to_storage`): magnitudes in [0.5, 1)
    times a per-run power of two, random signs; with `specials`, a NaN, +Inf and -Inf at random places where the
    type has them. A large array is drawn in chunks on threads, each chunk from its own generator spawned from
    `rng`, so that one seed still gives one array (a 16384^3 2:4 problem took 27 s to make in one thread:
    bench/host_prep_seconds.py)."""
    num = numerics(name)
    spread = _SPREAD[dtype(name).bytes]
    values = np.empty(size, dtype=np.float64)
    generators = rng.spawn(-(-size // chunks.CHUNK)) if size > chunks.CHUNK else [rng]
    chunks.in_chunks(size, lambda i, start, stop: _draw_into(generators[i], values[start:stop], num, spread))
    if specials and size:
        chosen = [v for v, ok in ((np.nan, num.has_nan), (np.inf, num.has_inf), (-np.inf, num.has_inf)) if ok]
        values[rng.choice(size, size=min(len(chosen), size), replace=False)] = chosen[:size]
    return values


def _draw_into(rng: np.random.Generator, out: np.ndarray, num: Numerics, spread: int) -> None:
    """`out` filled with runs of one power-of-two scale each (see draw_values)."""
    size = out.size
    lengths = _run_lengths(rng, size)
    runs = len(lengths)
    kind = rng.random(runs)
    exponent = np.where(kind < 0.6, 0, rng.integers(-spread, spread + 1, size=runs))
    low_normal = int(np.log2(num.smallest_normal))
    # a few mantissa bits kept where the type allows; fp8 e4m3 has subnormal exponents -7 only
    deepest = min(max(int(np.log2(num.smallest_subnormal)) + 3, low_normal - 6), low_normal - 1)
    subnormal = kind >= 0.92  # a few runs whose values are subnormal in the type
    exponent = np.where(subnormal, rng.integers(deepest, low_normal, size=runs), exponent)
    scale = np.repeat(np.exp2(exponent.astype(np.float64)), lengths)[:size]
    # magnitude and sign from one uniform draw r: r in [0, 0.5) gives -(0.5 + r), r in [0.5, 1) gives r
    r = rng.random(size)
    np.multiply(np.where(r < 0.5, -0.5 - r, r), scale, out=out)


@dataclass(frozen=True)
class ElementBounds:
    """Each element's largest allowed |out - ref|, and where the exact result lies in the subnormal range of the
    accumulation type (there, a flush to zero is the likely cause of a failure)."""

    bound: np.ndarray
    subnormal: np.ndarray


def element_bound(ref: np.ndarray, condition: np.ndarray, terms: np.ndarray, accumulate: str, out: str,
                  tolerance: float | None = None, aligned_sum_bits: int | None = None) -> ElementBounds:
    """|out - ref| <= 2(n + 2) u_acc sum|a||b| + u_out |ref| + (n + 1) eta_acc + eta_out [+ 2^-b sum|a||b|].

    n terms each rounded once in the accumulation type (products of lower-precision inputs are exact in it;
    the factor 2 covers tensor cores that truncate instead of rounding), one rounding to the output type, and the
    absolute error of underflow (eta: the smallest subnormal). Any summation order meets it; a cheaper
    accumulation type or dropped terms do not. A spec's `tolerance` loosens it to tolerance * sum|a||b|.

    `aligned_sum_bits` b: instructions that add their products in fixed point aligned to the largest cut each product
    to a unit of the largest, so their loss is not bounded by their own terms; the allowance 2^-b of the element's
    condition is fitted to measured instructions with a margin (e4m3: sparse24_gemm's ALIGNED_SUM_BITS). It admits
    most elements of a cheaper accumulation too (e4m3: an fp16 running sum); only the norm-wise error tells them apart.
    """
    acc, dst = numerics(accumulate), numerics(out)
    aligned = 2.0 ** -aligned_sum_bits if aligned_sum_bits is not None else 0.0
    shape = np.broadcast_shapes(ref.shape, condition.shape, np.shape(terms))  # terms may broadcast (one per row)
    bound, subnormal = np.empty(shape), np.empty(shape, dtype=bool)

    def block(i: int, start: int, stop: int) -> None:
        """The formula in place over rows start:stop, in its order (element by element the same as whole arrays)."""
        r, c, n = (np.broadcast_to(a, shape)[start:stop] for a in (ref, condition, terms))
        b = bound[start:stop]
        with np.errstate(invalid="ignore", over="ignore"):
            np.multiply(2 * (n + 2) * acc.unit_roundoff + aligned, c, out=b)
            b += np.abs(r) * dst.unit_roundoff
            b += (n + 1) * acc.smallest_subnormal
            b += dst.smallest_subnormal
            if tolerance is not None:
                np.maximum(b, tolerance * c, out=b)
            np.less(c, (n + 1) * acc.smallest_normal, out=subnormal[start:stop])

    chunks.in_row_blocks(shape, block, chunks.ELEMENTWISE)
    return ElementBounds(bound=bound, subnormal=subnormal)


def element_ok(out: np.ndarray, ref: np.ndarray, bound: np.ndarray, largest: float) -> np.ndarray:
    """Where `out` meets its element's bound. A NaN result must be NaN; an infinite one equal; a finite one within
    its bound, or, when it lies within the bound of the output type's largest value, an infinity of its sign
    (rounding to the type may overflow). The benchmark's device check (tools/run_checks.py) is the same rule."""
    finite = np.isfinite(ref)
    with np.errstate(invalid="ignore"):
        close = finite & (np.abs(out - ref) <= bound)
        overflow = finite & (np.abs(ref) + bound >= largest) & np.isinf(out) & (np.signbit(out) == np.signbit(ref))
        special = (np.isnan(ref) & np.isnan(out)) | (np.isinf(ref) & (out == ref))
    return close | overflow | special
