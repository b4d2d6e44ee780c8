"""The report's figures as PNG bytes (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen before pyplot loads)
from matplotlib.figure import Figure  # noqa: E402

from sparseditto.evals.metrics import fast_p, speedup  # noqa: E402
from sparseditto.evals.records import SpecRecord  # noqa: E402


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def speedup_chart(records: list[SpecRecord], libs: list[str]) -> bytes | None:
    """Grouped bars: each spec's speedup against each library (log scale, 1x marked); None if nothing was measured."""
    measured = [lib for lib in libs if any(speedup(r, lib) for r in records)]
    if not measured:
        return None
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(records) + 2), 4))
    width = 0.8 / len(measured)
    for k, lib in enumerate(measured):
        xs = [n + k * width for n, r in enumerate(records) if speedup(r, lib)]
        ys = [speedup(r, lib) for r in records if speedup(r, lib)]
        ax.bar(xs, ys, width, label=lib)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks([n + 0.4 - width / 2 for n in range(len(records))], [r.spec_id for r in records], rotation=30, ha="right")
    ax.set_ylabel("speedup (baseline time / kernel time)")
    ax.legend(fontsize="small")
    return _png(fig)


def fast_p_chart(records: list[SpecRecord], libs: list[str]) -> bytes | None:
    """fast_p as p grows, one curve per library; None if nothing was measured."""
    top = max((s for r in records for lib in libs if (s := speedup(r, lib))), default=None)
    if top is None:
        return None
    ps = [i * max(top, 2.0) * 1.1 / 200 for i in range(201)]
    fig, ax = plt.subplots(figsize=(6, 4))
    for lib in libs:
        ax.step(ps, [fast_p(records, lib, p) or 0.0 for p in ps], where="post", label=lib)
    ax.axvline(1.0, color="grey", linewidth=0.6, linestyle="--")
    ax.set_xlabel("p (speedup threshold)")
    ax.set_ylabel("fast_p: share correct and > p x faster")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize="small")
    return _png(fig)


def time_chart(records: list[SpecRecord]) -> bytes:
    """Seconds to the best kernel and in all, per spec, with the best kernel's iteration number on top."""
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(records) + 2), 4))
    xs = range(len(records))
    ax.bar([x - 0.2 for x in xs], [r.seconds for r in records], 0.4, label="whole run")
    ax.bar([x + 0.2 for x in xs], [r.seconds_to_best or 0.0 for r in records], 0.4, label="to the best kernel")
    for x, r in zip(xs, records):
        if r.best_iteration is not None:
            ax.annotate(f"#{r.best_iteration}/{r.iterations}", (x + 0.2, r.seconds_to_best or 0.0), ha="center",
                        va="bottom", fontsize="x-small")
    ax.set_xticks(list(xs), [r.spec_id for r in records], rotation=30, ha="right")
    ax.set_ylabel("seconds")
    ax.legend(fontsize="small")
    return _png(fig)
