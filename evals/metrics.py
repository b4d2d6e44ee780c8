"""Suite metrics over spec records: correctness, speedups, fast_p, geometric means, time to solution.

Pure functions of the records. Only a spec whose kernel passed correctness on the GPU counts as
correct; compile-only and failed specs stay in every denominator, so they lower fast_p, never raise it.
"""

from __future__ import annotations

import math
from statistics import median

from pydantic import BaseModel

from sparseditto.evals.records import SpecRecord

P_VALUES = (0.0, 1.0, 1.5, 2.0)
# a pseudo-library: per spec, the fastest correct baseline of any library
FASTEST = "fastest baseline"


def speedup(record: SpecRecord, library: str) -> float | None:
    """Baseline time / kernel time against `library` (or FASTEST); None unless the kernel is correct and both were timed."""
    if not record.correct:
        return None
    return record.speedup_vs_best if library == FASTEST else record.speedups.get(library)


def libraries(records: list[SpecRecord]) -> list[str]:
    """Every library a kernel was timed against, then FASTEST."""
    return sorted({lib for r in records for lib in r.speedups}) + [FASTEST]


def counted_against(records: list[SpecRecord], library: str) -> list[SpecRecord]:
    """The specs fast_p against `library` is a share of: those timed against it, and every spec without a correct kernel.

    A correct spec whose operation the library does not serve at that size (dense cuBLAS for a 1M x 1M SpMV)
    is left out; a failed or unexecuted spec cannot say which libraries apply, so it counts against all.
    """
    return [r for r in records if not r.correct or speedup(r, library) is not None]


def fast_p(records: list[SpecRecord], library: str, p: float) -> float | None:
    """Share of the counted specs that are correct and more than p times faster than `library` (KernelBench's fast_p)."""
    pool = counted_against(records, library)
    if not pool:
        return None
    return sum(1 for r in pool if (s := speedup(r, library)) is not None and s > p) / len(pool)


def geomean_speedup(records: list[SpecRecord], library: str) -> float | None:
    values = [s for r in records if (s := speedup(r, library)) is not None]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


class SuiteSummary(BaseModel):
    specs: int
    correct: int
    incorrect: int
    not_executed: int
    errors: int
    correctness_rate: float | None
    fast_p: dict[str, dict[float, float | None]]
    geomean_speedup: dict[str, float | None]
    counted: dict[str, int]
    mean_bandwidth_fraction: float | None
    median_iterations_to_best: float | None
    # the share of specs with a correct kernel whose first candidate was within 15% of the best
    first_within_15pct: float | None = None
    median_seconds_to_best: float | None
    total_seconds: float
    tokens: dict[str, int]


def summarize(records: list[SpecRecord]) -> SuiteSummary:
    libs = libraries(records)
    fractions = [r.bandwidth_fraction for r in records if r.correct and r.bandwidth_fraction is not None]
    to_best = [r for r in records if r.correct and r.best_iteration is not None]
    tokens: dict[str, int] = {}
    for r in records:
        for kind, n in r.tokens.items():
            tokens[kind] = tokens.get(kind, 0) + n
    return SuiteSummary(
        specs=len(records),
        correct=sum(r.correct for r in records),
        incorrect=sum(r.correctness in ("incorrect", "no_kernel") and r.status != "error" for r in records),
        not_executed=sum(r.correctness == "not_executed" for r in records),
        errors=sum(r.status == "error" for r in records),
        correctness_rate=sum(r.correct for r in records) / len(records) if records else None,
        fast_p={lib: {p: fast_p(records, lib, p) for p in P_VALUES} for lib in libs},
        geomean_speedup={lib: geomean_speedup(records, lib) for lib in libs},
        counted={lib: len(counted_against(records, lib)) for lib in libs},
        mean_bandwidth_fraction=sum(fractions) / len(fractions) if fractions else None,
        median_iterations_to_best=median(r.best_iteration for r in to_best) if to_best else None,
        first_within_15pct=(sum(r.first_over_best is not None and r.first_over_best <= 1.15 for r in to_best) / len(to_best)
                            if to_best else None),
        median_seconds_to_best=median(r.seconds_to_best or 0.0 for r in to_best) if to_best else None,
        total_seconds=sum(r.seconds for r in records),
        tokens=tokens,
    )
