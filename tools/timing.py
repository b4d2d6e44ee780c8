"""Kernel timing with CUDA events: warm-up, L2 flushed before every timed run, median of many runs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pydantic import BaseModel


class Timing(BaseModel):
    median_us: float
    p10_us: float
    p90_us: float
    runs: int


class L2Flusher:
    """Writes a buffer twice the L2 size so that no timed run starts with its data cached."""

    def __init__(self) -> None:
        import cupy as cp

        l2 = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["l2CacheSize"]
        self._buf = cp.empty(max(2 * l2, 1 << 20) // 4, dtype=cp.int32)

    def __call__(self) -> None:
        self._buf.fill(1)


def time_call(run: Callable[[], None], before_each: Callable[[], None], *, after_each: Callable[[], None] | None = None,
              warmup: int = 5, runs: int = 30) -> Timing:
    """Median time of `run` on the current stream. `before_each` (L2 flush, output poisoning, fresh inputs) and
    `after_each` (checking the output) run outside the events, around warm-up and timed runs alike, so that a
    kernel cannot tell them apart.

    The whole device is synchronised before the events are read. Candidates cannot put work on other
    streams: they are device code launched by the runner, and the static check refuses device-side
    launches and stream APIs.
    """
    import cupy as cp

    stream = cp.cuda.get_current_stream()
    for _ in range(warmup):
        before_each()
        run()
        if after_each:
            after_each()
    cp.cuda.Device().synchronize()
    starts = [cp.cuda.Event() for _ in range(runs)]
    ends = [cp.cuda.Event() for _ in range(runs)]
    for i in range(runs):
        before_each()
        starts[i].record(stream)
        run()
        ends[i].record(stream)
        if after_each:
            after_each()
    cp.cuda.Device().synchronize()
    times = np.array([cp.cuda.get_elapsed_time(s, e) * 1e3 for s, e in zip(starts, ends)])
    return Timing(
        median_us=float(np.median(times)),
        p10_us=float(np.percentile(times, 10)),
        p90_us=float(np.percentile(times, 90)),
        runs=runs,
    )


def device_copy_bandwidth(flush: L2Flusher, nbytes: int = 1 << 30) -> float:
    """Measured device-to-device copy bandwidth in bytes/s (bytes read plus bytes written)."""
    import cupy as cp

    src = cp.ones(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    t = time_call(lambda: dst.__setitem__(Ellipsis, src), flush, warmup=2, runs=10)
    del src, dst
    return 2 * nbytes / (t.median_us * 1e-6)
