"""Checks after every benchmark run, on the device: each output element against its bound, each input against
its pristine copy.

The harness's own kernels (fp32 subnormal outputs decoded from their bits: with conversions on the device every fp32
run failed the check on the H200, read, we infer, as zero), counting into one buffer that is allocated before the
candidate's buffers and read once after the last run, so that checking an element-wise family's runs adds no
synchronisation and no allocation between runs. The element rule is tools/values.py `element_ok`, written once
more in CUDA.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sparseditto.tools.dtypes import DTYPES, to_float64

CHECK_SOURCE = r"""
__device__ __forceinline__ bool sd_within(double out, double ref, double bound, double largest)
{
    if (isnan(ref)) return isnan(out);
    if (isinf(ref)) return out == ref;
    if (fabs(out - ref) <= bound) return true;  // false for a NaN out
    return isinf(out) && fabs(ref) + bound >= largest && signbit(out) == signbit(ref);
}

__device__ __forceinline__ void sd_tally(unsigned long long n, unsigned long long* count)
{
    for (int offset = 16; offset; offset >>= 1) n += __shfl_down_sync(0xffffffffu, n, offset);
    if ((threadIdx.x & 31) == 0 && n) atomicAdd(count, n);
}

// fp32 bits to double by integer arithmetic for subnormals: with conversions (CuPy's, then a plain cast here)
// every fp32 run failed the check on the H200 while fp16 passed; a flush of subnormals is the inferred cause
__device__ __forceinline__ double sd_f32_bits(unsigned int b)
{
    if ((b & 0x7F800000u) == 0u) {
        const double v = ldexp((double)(b & 0x7FFFFFu), -149);
        return (b >> 31) ? -v : v;
    }
    return (double)__uint_as_float(b);
}

#define SD_STRIDE(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); \
                             i += (long long)gridDim.x * blockDim.x)

extern "C" __global__ void sd_outside_f32(const unsigned int* out, const double* ref, const double* bound, double largest,
                                          long long n, unsigned long long* count)
{
    unsigned long long bad = 0;
    SD_STRIDE(i, n) bad += !sd_within(sd_f32_bits(out[i]), ref[i], bound[i], largest);
    sd_tally(bad, count);
}

extern "C" __global__ void sd_outside_f64(const double* out, const double* ref, const double* bound, double largest,
                                          long long n, unsigned long long* count)
{
    unsigned long long bad = 0;
    SD_STRIDE(i, n) bad += !sd_within(out[i], ref[i], bound[i], largest);
    sd_tally(bad, count);
}

extern "C" __global__ void sd_outside_u16(const unsigned short* out, const double* table, const double* ref,
                                          const double* bound, double largest, long long n, unsigned long long* count)
{
    unsigned long long bad = 0;
    SD_STRIDE(i, n) bad += !sd_within(table[out[i]], ref[i], bound[i], largest);
    sd_tally(bad, count);
}

extern "C" __global__ void sd_outside_u8(const unsigned char* out, const double* table, const double* ref,
                                         const double* bound, double largest, long long n, unsigned long long* count)
{
    unsigned long long bad = 0;
    SD_STRIDE(i, n) bad += !sd_within(table[out[i]], ref[i], bound[i], largest);
    sd_tally(bad, count);
}

extern "C" __global__ void sd_differ(const unsigned char* a, const unsigned char* b, long long n,
                                     unsigned long long* count)
{
    unsigned long long bad = 0;
    SD_STRIDE(i, n) bad += a[i] != b[i];
    sd_tally(bad, count);
}
"""
_GRID, _BLOCK = 1024, 256


class RunChecker:
    """Counts, per run, the output elements outside their bounds and the input bytes that changed."""

    def __init__(self, runs: int) -> None:
        import cupy as cp

        self._module = cp.RawModule(code=CHECK_SOURCE, options=("--std=c++17", "--ftz=false"))
        self.counts = cp.zeros((runs, 2), dtype=cp.uint64)
        self._tables: dict[str, Any] = {}

    def _table(self, name: str) -> Any:
        """float64 of every bit pattern of an 8- or 16-bit type."""
        import cupy as cp

        if name not in self._tables:
            d = DTYPES[name]
            bits = {1: np.uint8, 2: np.uint16}[d.bytes]
            patterns = np.arange(1 << (8 * d.bytes), dtype=np.int64).astype(bits).view(d.storage)
            self._tables[name] = cp.asarray(to_float64(patterns, name))
        return self._tables[name]

    def prepare(self, dtypes: set[str]) -> None:
        """Build the decoding tables up front: nothing is allocated between runs."""
        for name in dtypes:
            if DTYPES[name].bytes <= 2:
                self._table(name)

    def outside(self, run: int, out: Any, dtype: str, ref: Any, bound: Any, largest: float) -> None:
        count = self.counts[run, 0:1]
        n = np.int64(out.size)
        d = DTYPES[dtype]
        if d.name == "fp32":
            self._module.get_function("sd_outside_f32")((_GRID,), (_BLOCK,),
                                                        (out.view(np.uint32), ref, bound, np.float64(largest), n, count))
        elif not d.is_float:  # integers convert to float64 exactly
            self._module.get_function("sd_outside_f64")((_GRID,), (_BLOCK,),
                                                        (out.astype(np.float64), ref, bound, np.float64(largest), n, count))
        else:
            entry = {2: "sd_outside_u16", 1: "sd_outside_u8"}[d.bytes]
            raw = out.view({2: np.uint16, 1: np.uint8}[d.bytes])
            self._module.get_function(entry)((_GRID,), (_BLOCK,),
                                             (raw, self._table(dtype), ref, bound, np.float64(largest), n, count))

    def differ(self, run: int, a: Any, b: Any) -> None:
        self._module.get_function("sd_differ")((_GRID,), (_BLOCK,),
                                               (a.view(np.uint8), b.view(np.uint8), np.int64(a.nbytes), self.counts[run, 1:2]))

    def norm_outside(self, run: int, out: Any, dtype: str, ref: Any, tolerance: float) -> None:
        """A norm-wise family's verdict: 1 added to the run's count when ||out - ref|| > tolerance ||ref||."""
        import cupy as cp

        d = DTYPES[dtype]
        value = (self._table(dtype)[out.view({2: np.uint16, 1: np.uint8}[d.bytes])] if d.is_float and d.bytes <= 2
                 else out.astype(cp.float64))
        err = cp.linalg.norm(cp.nan_to_num(value - ref, nan=np.inf))
        self.counts[run, 0] += (~(err <= tolerance * cp.maximum(cp.linalg.norm(ref), 1e-300))).astype(np.uint64)

    def failing_runs(self) -> tuple[list[int], list[int]]:
        """The runs with an output outside its bounds, and those with a changed input (one read, after the runs)."""
        counts = self.counts.get()
        return [int(i) for i in np.flatnonzero(counts[:, 0])], [int(i) for i in np.flatnonzero(counts[:, 1])]
