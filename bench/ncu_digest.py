"""A readable digest of an Nsight Compute details page (`ncu --import R --page details --csv`).

`python bench/ncu_digest.py DETAILS.csv` prints, per profiled kernel, each section's metrics on one line each and
the rules' findings shortened: what the full set says about a hand-written kernel, small enough to read in a log.
`python bench/ncu_digest.py --raw RAW.csv` prints the raw page's (`--page raw --csv`) pipe utilisations and stall
reasons, which the details page does not show.
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict


def digest(path: str) -> list[str]:
    with open(path, newline="") as fh:
        rows = [r for r in csv.DictReader(line for line in fh if line.startswith('"'))]
    sections: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in rows:
        key = (f"{r.get('Kernel Name', '?')[:40]} #{r.get('ID', '?')}", r.get("Section Name", "?"))
        if r.get("Metric Name"):
            unit = r.get("Metric Unit") or ""
            sections[key].append(f"  {r['Metric Name']}: {r.get('Metric Value', '')} {unit}".rstrip())
        if r.get("Rule Description"):
            sections[key].append(f"  [{r.get('Rule Type', 'rule')}] {r['Rule Description'][:300]}")
    lines = []
    for (kernel, section), body in sections.items():
        lines.append(f"{kernel} | {section}")
        lines.extend(dict.fromkeys(body))
    return lines


RAW_PREFIXES = ("sm__pipe_tensor_cycles_active.avg.pct", "sm__inst_executed_pipe_alu.avg.pct", "sm__inst_executed_pipe_lsu.avg.pct",
                "sm__inst_executed.sum.per_cycle_active", "smsp__average_warps_issue_stalled_", "smsp__pcsamp_warps_issue_stalled_",
                # how busy shared memory and the L1 data path are (the 2:4 kernel's B operand is read from shared
                # memory once per 64-row slab: bench/NOTES.md, session 10)
                "l1tex__throughput.avg.pct", "l1tex__data_pipe_lsu_wavefronts_mem_shared", "l1tex__data_bank_",
                "sm__memory_throughput.avg.pct", "lts__throughput.avg.pct", "dram__throughput.avg.pct")


def raw_metrics(path: str) -> list[str]:
    """Each kernel's (row's) metrics named by RAW_PREFIXES, one per line, zero values left out."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    header, units, values = rows[0], rows[1], rows[2:]
    lines = []
    for row in values:
        for name, unit, value in zip(header, units, row):
            if name.startswith(RAW_PREFIXES) and value.replace(",", "") not in {"0", "0.0", ""}:
                lines.append(f"{name}: {value} {unit}".rstrip())
    return lines


if __name__ == "__main__":
    print("\n".join(raw_metrics(sys.argv[2]) if sys.argv[1] == "--raw" else digest(sys.argv[1])))
