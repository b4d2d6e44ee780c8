"""Every reference kernel at its starting parameters, verified on the GPU for each dtype it declares: correct on
fresh inputs, at held-out shapes, in both run orders and with its inputs unchanged (the checks every pipeline
iteration runs). Small shapes that are multiples of no tile, so the edge paths run too."""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.library import reference_kernels
from sparseditto.spec import Spec, parse_spec
from sparseditto.tools.families import get_family
from sparseditto.tools.verifier import GpuVerifier

from kernel_params import starting_params

CASES = [pytest.param(k, d, id=f"{k.name}-{d}") for k in reference_kernels() for d in k.dtypes]


def small_spec(family: str, dtype: str) -> Spec:
    if family == "csr_spmv":  # power-law rows: the split kernel gets long rows of several chunks
        return parse_spec({"operation": "spmv", "pattern": {"distribution": "power_law", "nnz_per_row": 12},
                           "M": 20011, "K": 20011, "dtype": dtype})
    if family == "csr_spmm":
        return parse_spec({"operation": "spmm", "pattern": {"distribution": "banded", "density": 0.05},
                           "M": 1003, "K": 997, "N": 200, "dtype": dtype})
    return parse_spec({**get_family(family).example_spec, "dtype": dtype})


@pytest.fixture(scope="module")
def verifier() -> GpuVerifier:
    from sparseditto.tools.device import detect

    arch = (detect().gpu or {}).get("arch", "sm_90")
    return GpuVerifier(arch=arch, trials=3, timeout_s=120, runs=5, sanitize=False, profile=False)


@pytest.mark.gpu
@pytest.mark.parametrize(("kernel", "dtype"), CASES)
def test_each_reference_kernel_is_correct_on_the_gpu(kernel, dtype, verifier):
    report = verifier.verify(kernel.instantiate(starting_params(kernel, dtype)), small_spec(kernel.family, dtype))
    correctness = report.stage("correctness")
    assert correctness is not None and correctness.status == "passed", [(f.stage, f.status, f.message) for f in report.feedback]
    assert report.correct and report.measurement is not None
