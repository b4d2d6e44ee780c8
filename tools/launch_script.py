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
