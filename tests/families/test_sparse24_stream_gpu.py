"""sp24_stream on the GPU where the reference-kernel test does not take it: its example spec (K = 1024) fits one K
slice, so the second launch, which sums the slices' partials in a fixed order, only runs here. K = 65 pairs of
64 columns in slices of 32 (16 warps x 2 pairs): the third slice holds one pair of one warp; M and N have tails and
the epilogue is complete. The CPU emulation (test_sparse24_kernels.py) checks the indices; this checks the
instruction, the launch geometry, the workspace written before it is read, and the sanitizer's verdict."""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.families.sparse24_gemm import stream_start
from sparseditto.tools.verifier import GpuVerifier


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8_e4m3"])
def test_sp24_stream_sums_several_k_slices_correctly(dtype):
    from sparseditto.tools.device import detect

    arch = (detect().gpu or {}).get("arch", "sm_90")
    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": 1040, "K": 4160, "N": 13, "dtype": dtype,
                       "epilogue": {"bias": True, "activation": "gelu_tanh", "alpha": True}})
    params = stream_start(2)
    verifier = GpuVerifier(arch=arch, trials=3, timeout_s=120, runs=5, sanitize=True, profile=False)
    report = verifier.verify(get_kernel("sp24_stream").instantiate(params), spec)
    feedback = [(f.stage, f.status, f.message) for f in report.feedback]
    correctness = report.stage("correctness")
    assert correctness is not None and correctness.status == "passed", feedback
    assert report.correct and report.measurement is not None, feedback
    sanitizer = report.stage("sanitizer")
    assert sanitizer is None or sanitizer.status in {"passed", "not_executed"}, feedback
