"""report.md and a self-contained report.html (figures embedded as base64 PNG) from a suite's records.

Both files are rendered from the same tables, so the Markdown and the HTML always state the same numbers,
and both are the numbers of results.jsonl.
"""

from __future__ import annotations

import base64
import html
import time
from pathlib import Path

from pydantic import BaseModel

from sparseditto.evals.metrics import P_VALUES, SuiteSummary, libraries, speedup, summarize
from sparseditto.evals.plots import fast_p_chart, speedup_chart, time_chart
from sparseditto.evals.records import SpecRecord
from sparseditto.evals.tables import Table, markdown_table, num, percent, times

FLOOR_NOTE = (
    "Of floor: the family's bytes that no layout avoids (for sparse operands: the values, the dense entries the "
    "nonzeros can touch, and the output) at the device's copy bandwidth, over the time. Of its format's floor: the "
    "same with the arrays the chosen kernel reads whole as its preparation laid them out (index bytes and padding "
    "included) in place of the values."
)
FAST_P_NOTE = (
    "fast_p against a library: the share of specs whose kernel is correct and more than p times faster than the "
    "library's fastest correct configuration. The configuration fastest in the spec's first verification is timed "
    "again in the same process, on the same inputs, as each kernel it is compared with; the others are timed by the "
    "spec's first verification (for a generated pattern, on another draw of the matrix) and carried. Specs that failed, "
    "raised or were not executed count in every denominator; a correct spec counts against a library only if that "
    "library was timed for it. Seconds to the best kernel: the verification time of the iterations up to it."
)


class Report(BaseModel):
    title: str
    facts: list[str]
    warnings: list[str]
    sections: list[tuple[str, Table]]
    errors: list[str]


def summary_table(s: SuiteSummary) -> Table:
    tokens = ", ".join(f"{k} {v}" for k, v in sorted(s.tokens.items())) or "none"
    rows = [["specs", str(s.specs)], ["correct", f"{s.correct} ({percent(s.correctness_rate)})"],
            ["incorrect or no kernel", str(s.incorrect)], ["not executed (compile-only)", str(s.not_executed)],
            ["errors", str(s.errors)], ["mean fraction of the bandwidth floor (correct specs)", percent(s.mean_bandwidth_fraction)],
            ["median iterations to the best kernel", num(s.median_iterations_to_best, "{:g}")],
            ["first candidate within 15% of the best", percent(s.first_within_15pct)],
            ["median seconds to the best kernel", num(s.median_seconds_to_best, "{:.1f}")],
            ["seconds in all", f"{s.total_seconds:.1f}"],
            ["seconds per spec", num(s.total_seconds / s.specs if s.specs else None, "{:.1f}")], ["LLM tokens", tokens]]
    return Table(headers=["measure", "value"], rows=rows)


def fast_p_table(s: SuiteSummary) -> Table:
    headers = ["against", *[f"fast_{p:g}" for p in P_VALUES], "geomean speedup", "specs counted"]
    rows = [[lib, *[percent(s.fast_p[lib][p]) for p in P_VALUES], times(s.geomean_speedup[lib]), str(s.counted[lib])]
            for lib in s.fast_p]
    return Table(headers=headers, rows=rows)


def spec_table(records: list[SpecRecord], libs: list[str]) -> Table:
    headers = ["spec", "tags", "status", "correctness", "best kernel", "us", *[f"vs {lib}" for lib in libs],
               "of floor", "of its format's floor", "TFLOP/s (of peak)", "best at / iterations", "first's time / best's", "s to best / s", "tokens"]
    rows = []
    for r in records:
        compute = f"{r.tflops:.1f} ({percent(r.peak_fraction)})" if r.tflops is not None else "-"
        rows.append([r.spec_id, " ".join(r.tags), r.status, r.correctness.replace("_", " "), r.candidate or "-",
                     num(r.median_us, "{:.1f}"), *[times(speedup(r, lib)) for lib in libs], percent(r.bandwidth_fraction),
                     percent(r.format_fraction), compute,
                     f"{r.best_iteration or '-'} / {r.iterations}", times(r.first_over_best),
                     f"{num(r.seconds_to_best, '{:.1f}')} / {r.seconds:.1f}", str(r.tokens.get("total", 0) or "-")])
    return Table(headers=headers, rows=rows)


def baseline_table(records: list[SpecRecord]) -> Table:
    rows = [[r.spec_id, lib, b.name, f"{b.median_us:.1f}", b.config]
            for r in records for lib, b in sorted(r.baselines.items())]
    return Table(headers=["spec", "library", "fastest configuration", "us", "how it was called"], rows=rows)


def build_report(suite: str, records: list[SpecRecord]) -> Report:
    summary = summarize(records)
    libs = libraries(records)
    policies = sorted({r.policy for r in records})
    budgets = sorted({str(r.budget) if r.budget is not None else "per spec" for r in records})
    devices = sorted({r.device for r in records if r.device}) or ["none (no GPU stage executed)"]
    warnings = []
    if summary.not_executed:
        warnings.append(f"Compile-only: {summary.not_executed} of {summary.specs} specs were compiled but not executed "
                        "(no GPU): nothing about them was measured, and none counts as correct.")
    return Report(
        title=f"Evaluation of suite {suite}",
        facts=[f"Policy {', '.join(policies) or '-'}; iteration budget {', '.join(budgets) or '-'}; budget spent -> best kernel approved.",
               f"Device: {', '.join(devices)}. Report written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
               f"from {summary.specs} spec records (results.jsonl).", FLOOR_NOTE],
        warnings=warnings,
        sections=[("Summary", summary_table(summary)), ("fast_p and geometric-mean speedup", fast_p_table(summary)),
                  ("Per spec", spec_table(records, libs)),
                  ("Baselines (fastest correct configuration per library)", baseline_table(records))],
        errors=[f"{r.spec_id}: {r.error}" for r in records if r.error],
    )


def render_markdown(report: Report) -> str:
    lines = [f"# {report.title}", "", *report.facts, ""]
    lines += [f"**{w}**\n" for w in report.warnings]
    for title, table in report.sections:
        lines += [f"## {title}", "", *markdown_table(table), ""]
    if report.errors:
        lines += ["## Errors", "", *[f"- {e}" for e in report.errors], ""]
    lines += [FAST_P_NOTE, "", "Figures: report.html.", ""]
    return "\n".join(lines)


_CSS = ("body{font-family:sans-serif;max-width:75em;margin:2em auto;color:#222}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;font-size:.9em}th{background:#f2f2f2}"
        ".warn{background:#fff3cd;padding:.6em;border:1px solid #e0c36a}img{max-width:100%}")


def render_html(report: Report, figures: list[tuple[str, bytes | None]]) -> str:
    e = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(report.title)}</title><style>{_CSS}</style>"
             f"</head><body><h1>{e(report.title)}</h1>", *[f"<p>{e(f)}</p>" for f in report.facts],
             *[f"<p class='warn'>{e(w)}</p>" for w in report.warnings]]
    for title, table in report.sections:
        parts.append(f"<h2>{e(title)}</h2>")
        if not table.rows:
            parts.append("<p>None.</p>")
            continue
        head = "".join(f"<th>{e(h)}</th>" for h in table.headers)
        body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in table.rows)
        parts.append(f"<table><tr>{head}</tr>{body}</table>")
    if report.errors:
        parts.append("<h2>Errors</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in report.errors) + "</ul>")
    parts.append("<h2>Figures</h2>")
    for caption, png in figures:
        if png is None:
            parts.append(f"<p>{e(caption)}: nothing measured, nothing to plot.</p>")
        else:
            parts.append(f"<figure><img alt='{e(caption)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
                         f"<figcaption>{e(caption)}</figcaption></figure>")
    parts.append(f"<p>{e(FAST_P_NOTE)}</p></body></html>")
    return "\n".join(parts)


def write_reports(suite: str, records: list[SpecRecord], out: Path) -> tuple[Path, Path]:
    """Write <out>/report.md and <out>/report.html; return their paths."""
    report = build_report(suite, records)
    libs = libraries(records)
    figures = [("Speedup per spec against each baseline library", speedup_chart(records, libs)),
               ("fast_p against each library as the threshold p grows", fast_p_chart(records, libs)),
               ("Time to solution", time_chart(records))]
    out.mkdir(parents=True, exist_ok=True)
    md, page = out / "report.md", out / "report.html"
    md.write_text(render_markdown(report))
    page.write_text(render_html(report, figures))
    return md, page
