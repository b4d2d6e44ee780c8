"""Large host arrays worked on in chunks on threads (NumPy's casts and random fills release the interpreter lock)."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

# elements per task: below one chunk the work runs in the calling thread
CHUNK = 1 << 22


def in_chunks(size: int, work: Callable[[int, int, int], None]) -> None:
    """work(index, start, stop) for every chunk of range(size), on up to one thread per core."""
    starts = range(0, size, CHUNK)
    if len(starts) <= 1:
        work(0, 0, size)
        return
    with ThreadPoolExecutor(max_workers=min(len(starts), os.cpu_count() or 1)) as pool:
        for done in [pool.submit(work, i, start, min(start + CHUNK, size)) for i, start in enumerate(starts)]:
            done.result()
