"""Whether a refactor of shared device code left the machine code of the reference kernels unchanged.

`python bench/sass_identity.py snapshot OUT.json` writes the SASS instructions (addresses dropped) of every
reference kernel at its starting parameters in each declared dtype; `python bench/sass_identity.py compare A B`
names the kernels whose instructions differ. Identical machine code keeps the GPU checks made before the refactor
valid; any difference needs the device again.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from sparseditto.knowledge_base.library import reference_kernels
from sparseditto.tools.compiler import compile_source
from sparseditto.tools.dtypes import DTYPES
from sparseditto.tools.sass import disassemble

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from kernel_params import starting_params  # noqa: E402

_ADDRESS = re.compile(r"/\*[0-9a-f]{4,}\*/")


def snapshot(out: str) -> None:
    listings = {}
    for kernel in reference_kernels():
        for dtype in kernel.dtypes:
            candidate = kernel.instantiate(starting_params(kernel, dtype))
            result = compile_source(candidate.source, candidate.compile_arch("sm_90"), candidate.defines(DTYPES[dtype].code))
            if not result.ok:
                raise SystemExit(f"{kernel.name} {dtype} does not compile: {result.log[-300:]}")
            listings[f"{kernel.name}-{dtype}"] = [_ADDRESS.sub("", line).strip() for line in
                                                  disassemble(result.cubin).splitlines() if _ADDRESS.search(line)]
    Path(out).write_text(json.dumps(listings))
    print(f"{len(listings)} kernel listings written to {out}")


def compare(a: str, b: str) -> None:
    before, after = json.loads(Path(a).read_text()), json.loads(Path(b).read_text())
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    print("identical" if not changed else "different: " + ", ".join(changed))


if __name__ == "__main__":
    {"snapshot": snapshot, "compare": compare}[sys.argv[1]](*sys.argv[2:])
