"""Whether a reference kernel's machine code changed since COMMIT: for each parameter set and dtype, the kernel as
this checkout has it and as COMMIT had it (its folder of kernel files and the project prelude read with `git show`)
compiled for the arch, disassembled (nvdisasm) and compared byte for byte. For refactors that must not change
what runs, e.g. the e4m3 generalisation of sp24_wgmma_sp (bench/NOTES.md, session 12):

    python3 bench/sass_compare.py sp24_wgmma_sp 375fd28 --dtypes fp16,bf16 \\
        --params '{"BM": 256, "BN": 128, "BK": 128, "STAGES": 3, ...}' [--params ...]

`--function NAME` compares only that entry's code (e.g. the product where the sequence's other kernel changed).
Prints one line per case and exits 1 when any differs."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from sparseditto.knowledge_base.library import _parse, get_kernel, prelude
from sparseditto.tools.compiler import compile_source
from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.sass import disassemble

ROOT = Path(__file__).resolve().parent.parent


def git_show(commit: str, path: Path) -> str | None:
    """The file at `commit` (path relative to the repository), or None where it did not exist."""
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{path.as_posix()}"], capture_output=True,
                           text=True)
    return shown.stdout if shown.returncode == 0 else None


def source_at(commit: str, name: str, params: dict[str, int]) -> str:
    """The kernel's candidate source as COMMIT would have made it."""
    kernel = get_kernel(name)
    folder = kernel.path.parent.relative_to(ROOT)
    listing = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", commit, f"{folder.as_posix()}/"],
                             capture_output=True, text=True, check=True).stdout.split()
    old = Path(tempfile.mkdtemp()) / folder.name
    old.mkdir()
    for file in listing:  # the whole folder: the family prelude, and a body_from header's code file
        (old / Path(file).name).write_text(git_show(commit, Path(file)) or "")
    then_kernel = _parse(old / kernel.path.name, kernel.family)
    # a parameter added since COMMIT is left out there: the old code has its first value built in
    candidate = then_kernel.instantiate({k: v for k, v in params.items() if k in then_kernel.parameters})
    then = git_show(commit, Path("knowledge_base/kernels/prelude.cuh"))
    return candidate.source.replace(prelude(), then, 1)


def machine_code(source: str, defines: list[str], arch: str) -> str:
    result = compile_source(source, arch, defines)
    if not result.ok:
        raise SystemExit(result.log[-2000:])
    return disassemble(result.cubin)


def function_code(listing: str, name: str) -> str:
    """The listing's section of entry `name` (from its `.text.NAME` header to the next section), its labels numbered
    from 0 in order of appearance (nvdisasm numbers them across the whole file)."""
    lines, keep = [], False
    for line in listing.splitlines():
        if ".section" in line:
            keep = f".text.{name}," in line or line.rstrip().endswith(f".text.{name}")
        if keep:
            lines.append(line)
    if not lines:
        raise SystemExit(f"no section .text.{name} in the listing")
    labels: dict[str, str] = {}
    return re.sub(r"\.L_x_\d+", lambda m: labels.setdefault(m.group(0), f".L_{len(labels)}"), "\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel")
    parser.add_argument("commit")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--dtypes", default="fp16")
    parser.add_argument("--params", action="append", type=json.loads, required=True,
                        help="a parameter set as JSON (repeat for more)")
    parser.add_argument("--function", help="compare only this entry's code")
    args = parser.parse_args()

    def code(source: str, defines: list[str]) -> str:
        listing = machine_code(source, defines, args.arch)
        return function_code(listing, args.function) if args.function else listing

    differ = 0
    for params in args.params:
        candidate = get_kernel(args.kernel).instantiate(params)
        before = source_at(args.commit, args.kernel, params)
        for name in args.dtypes.split(","):
            defines = candidate.defines(dtype_info(name).code)
            same = code(candidate.source, defines) == code(before, defines)
            differ += not same
            print(f"{'same' if same else 'DIFFERS'}  {name:9s} {json.dumps(params)}", flush=True)
    print(f"{differ} of {len(args.params) * len(args.dtypes.split(','))} cases differ from {args.commit}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
