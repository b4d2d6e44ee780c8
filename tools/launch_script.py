"""Launch expressions turned into plain Python, for the `launch.py` a run folder gets."""

from __future__ import annotations

from typing import TYPE_CHECKING

import ast

if TYPE_CHECKING:
    from sparseditto.tools.contract import KernelCandidate



def python_expr(expr: str) -> str:
    """A launch expression (already validated by the safe evaluator) as Python over the dict `s`."""

    class ToLookup(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in {"ceil_div", "min", "max"}:
                return node
            return ast.Subscript(value=ast.Name(id="s", ctx=ast.Load()), slice=ast.Constant(node.id), ctx=ast.Load())

    return ast.unparse(ToLookup().visit(ast.parse(expr, mode="eval")))


def launch_table(candidate: KernelCandidate) -> str:
    """LAUNCHES (entry, grid, block, shared bytes, argument names) and WORKSPACE (dtype, size) as Python source."""
    launches = []
    for k in candidate.kernels:
        grid = ", ".join(python_expr(e) for e in k.grid)
        block = ", ".join(python_expr(e) for e in k.block)
        args = [a if isinstance(a, str) else a.name for a in k.args]
        launches.append(f"    ({k.entry!r}, lambda s: ({grid}), lambda s: ({block}), lambda s: {python_expr(k.shared_bytes)}, {args!r}),")
    workspace = ", ".join(f"{n!r}: ({w.dtype!r}, lambda s: {python_expr(w.size)})" for n, w in candidate.workspace.items())
    return "LAUNCHES = [\n" + "\n".join(launches) + "\n]\nWORKSPACE = {" + workspace + "}"


# The CuPy import and the device check every launch.py carries: `python launch.py --help` works on a machine
# without CuPy or a GPU, and run() there raises NoCudaDevice with what is missing, not a raw driver error.
RUNTIME = '''import sys
from pathlib import Path

import numpy as np

try:
    import cupy as cp
except Exception as _exc:  # noqa: BLE001 - CuPy missing or unusable: --help still works, run() says why
    cp = None
    _CUPY_ERROR = f"{type(_exc).__name__}: {_exc}"


class NoCudaDevice(RuntimeError):
    """run() needs CuPy and a CUDA device it can use."""


def require_device():
    """Raise NoCudaDevice unless CuPy is installed and sees a CUDA device."""
    if cp is None:
        raise NoCudaDevice(f"no CUDA device: CuPy cannot be imported ({_CUPY_ERROR}); install cupy-cuda12x or "
                           "cupy-cuda13x on a machine with an NVIDIA GPU and driver")
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - no driver, no device, a device in use by nothing CuPy can reach
        raise NoCudaDevice(f"no CUDA device: the CUDA runtime says {type(exc).__name__}: {exc}") from None
    if count < 1:
        raise NoCudaDevice("no CUDA device: the CUDA runtime sees none")'''


def main_block(usage: str) -> str:
    """The `if __name__ == "__main__"` of a launch.py: usage text for --help (and no arguments), exit 2 otherwise."""
    return f'''USAGE = {usage!r}


if __name__ == "__main__":
    if sys.argv[1:] in ([], ["-h"], ["--help"]):
        print(__doc__.strip())
        print()
        print(USAGE)
        sys.exit(0)
    print(f"launch.py: unknown arguments {{' '.join(sys.argv[1:])!r}}", file=sys.stderr)
    print(USAGE, file=sys.stderr)
    sys.exit(2)
'''
