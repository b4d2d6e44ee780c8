"""Two result sets side by side: which specs got better or worse from A to B.

Specs are matched by id. Correctness decides first; between two correct kernels the speedup against the
fastest baseline decides (a ratio measured side by side in one run, so it survives a change of machine
load), and the kernel time where a run timed no baseline. Changes within `tolerance` are "same".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel

from sparseditto.evals.metrics import FASTEST, fast_p, geomean_speedup
from sparseditto.evals.records import SpecRecord
from sparseditto.evals.tables import Table, markdown_table, percent, times

Verdict = Literal["better", "worse", "same", "only in A", "only in B"]


class SpecChange(BaseModel):
    spec_id: str
    a: SpecRecord | None
    b: SpecRecord | None
    verdict: Verdict
    why: str


def _judge(a: SpecRecord, b: SpecRecord, tolerance: float) -> tuple[Verdict, str]:
    if a.correct != b.correct:
        return ("better", f"now correct (was {a.correctness.replace('_', ' ')})") if b.correct else \
            ("worse", f"no longer correct ({b.correctness.replace('_', ' ')}, status {b.status})")
    if not a.correct:
        return "same", "correct in neither"
    if a.speedup_vs_best is not None and b.speedup_vs_best is not None:
        ratio, what = b.speedup_vs_best / a.speedup_vs_best, "speedup vs the fastest baseline"
    else:
        ratio, what = (a.median_us or 0.0) / (b.median_us or 1.0), "kernel time"
    if ratio > 1 + tolerance:
        return "better", f"{what} x{ratio:.2f}"
    if ratio < 1 / (1 + tolerance):
        return "worse", f"{what} x{ratio:.2f}"
    return "same", f"{what} within {tolerance:.0%}"


def compare_records(a: list[SpecRecord], b: list[SpecRecord], tolerance: float = 0.03) -> list[SpecChange]:
    """One change per spec id of A, then the ids only B has."""
    by_a, by_b = {r.spec_id: r for r in a}, {r.spec_id: r for r in b}
    changes = []
    for sid in [*by_a, *(s for s in by_b if s not in by_a)]:
        ra, rb = by_a.get(sid), by_b.get(sid)
        if ra is None or rb is None:
            verdict: Verdict = "only in A" if rb is None else "only in B"
            changes.append(SpecChange(spec_id=sid, a=ra, b=rb, verdict=verdict, why="not run in the other set"))
            continue
        verdict, why = _judge(ra, rb, tolerance)
        changes.append(SpecChange(spec_id=sid, a=ra, b=rb, verdict=verdict, why=why))
    return changes


def _side(r: SpecRecord | None) -> str:
    if r is None:
        return "-"
    if not r.correct:
        return f"{r.status}, {r.correctness.replace('_', ' ')}"
    vs = f", {r.speedup_vs_best:.2f}x" if r.speedup_vs_best is not None else ""
    return f"{r.median_us:.1f} us{vs}"


def changes_table(changes: list[SpecChange]) -> Table:
    return Table(headers=["spec", "A", "B", "change", "why"],
                 rows=[[c.spec_id, _side(c.a), _side(c.b), c.verdict, c.why] for c in changes])


def totals_table(a: list[SpecRecord], b: list[SpecRecord]) -> Table:
    """Suite-level numbers of A and B against the fastest baseline."""

    def row(name: str, fn: Callable[[list[SpecRecord]], str]) -> list[str]:
        return [name, fn(a), fn(b)]

    return Table(headers=["measure", "A", "B"], rows=[
        row("specs", lambda rs: str(len(rs))),
        row("correct", lambda rs: str(sum(r.correct for r in rs))),
        row("fast_1 vs the fastest baseline", lambda rs: percent(fast_p(rs, FASTEST, 1.0))),
        row("geomean speedup vs the fastest baseline", lambda rs: times(geomean_speedup(rs, FASTEST))),
    ])


def compare_markdown(a_name: str, b_name: str, changes: list[SpecChange], totals: Table) -> str:
    counts = {v: sum(c.verdict == v for c in changes) for v in ("better", "worse", "same")}
    return "\n".join([f"# {b_name} (B) against {a_name} (A)", "",
                      f"{counts['better']} better, {counts['worse']} worse, {counts['same']} the same.", "",
                      *markdown_table(totals), "", *markdown_table(changes_table(changes)), ""])
