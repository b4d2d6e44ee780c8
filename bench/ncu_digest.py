"""A readable digest of an Nsight Compute details page (`ncu --import R --page details --csv`).

`python bench/ncu_digest.py DETAILS.csv` prints, per profiled kernel, each section's metrics on one line each and
the rules' findings shortened: what the full set says about a hand-written kernel, small enough to read in a log.
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


if __name__ == "__main__":
    print("\n".join(digest(sys.argv[1])))
