"""The problem families, by name (`Spec.family`)."""

from sparseditto.tools.families.base import Problem, ProblemFamily
from sparseditto.tools.families.csr_spmm import CsrSpmm
from sparseditto.tools.families.csr_spmv import CsrSpmv

FAMILIES: dict[str, ProblemFamily] = {f.name: f for f in (CsrSpmv(), CsrSpmm())}

__all__ = ["FAMILIES", "Problem", "ProblemFamily"]
