"""sp24_wgmma_sp's (and its e4m3 sequence's) cluster, in-flight, B-by-TMA, tile-order, persistent and three-consumer variants on the GPU, where the reference-kernel test does not take them (its
example spec has N = 64, one column tile: no cluster). N = 400 makes four column tiles of 128 in two clusters (two of
256 in one), the last tile partly past N; M = 528 leaves a tail of 16 rows in a 256-row tile; K = 1088 is an odd
number of 64-column tiles (the in-flight loop's last, unpaired tile); B goes by TMA (N a multiple of 8) on the
main shape and by cp.async on the held-out shapes' N tails; the epilogue has a bias, ReLU and alpha. The CPU tests model the protocol and
check the machine code for register races; this checks the instructions, the multicast, the remote arrivals, the
cluster barriers and the sanitizer's verdict. Every variant runs in one runner process (run ahead), each judged
alone."""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.families.sparse24_gemm import WGMMA_FP8_START
from sparseditto.tools.verifier import GpuVerifier

VARIANTS = [{"BM": 256, "BN": 128, "BK": 64, "STAGES": 6, "LAG": 2, "CLUSTER": cluster, "INFLIGHT": inflight,
             "BTMA": btma, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2} for cluster, inflight, btma in ((1, 0, 1), (2, 0, 1), (1, 1, 1), (2, 1, 0))] + [
           {"BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 1, "CLUSTER": 2, "INFLIGHT": 1, "BTMA": 1, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
           {"BM": 128, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 4, "PERSIST": 0, "CONSUMERS": 2},
           {"BM": 128, "BN": 128, "BK": 64, "STAGES": 4, "LAG": 1, "CLUSTER": 2, "INFLIGHT": 0, "BTMA": 1, "RASTER": 4, "PERSIST": 0, "CONSUMERS": 2},
           {"BM": 128, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 4, "PERSIST": 1, "CONSUMERS": 2},
           {"BM": 128, "BN": 128, "BK": 64, "STAGES": 4, "LAG": 2, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 0, "RASTER": 1, "PERSIST": 1, "CONSUMERS": 2},
           {"BM": 192, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 3},
           {"BM": 192, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 2, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 0, "RASTER": 1, "PERSIST": 1, "CONSUMERS": 3}]


# e4m3 (sp24_wgmma_sp_fp8): the start (128 x 128, persistent, products added every 2 instructions), k-tiles of 128 in
# clusters (every 2), two slabs of 64 columns (every instruction), the start launched per tile and added every 4, two
# slabs of 64 columns in clusters (every instruction), 256 x 128 persistent with one scratch array (SCRATCH 1, M = 528
# a tail of 16 rows in the third tile row); K = 1088 is 8.5 k-tiles of 128 and 4.25 of 256;
# N = 400 takes the transposition's 16-byte path, the held-out N tails its byte path
FP8_VARIANTS = [WGMMA_FP8_START,
                {"BM": 128, "BN": 128, "BK": 128, "STAGES": 6, "LAG": 1, "CLUSTER": 2, "INFLIGHT": 0, "BTMA": 1, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2, "PROMOTE": 2, "SCRATCH": 2},
                {"BM": 256, "BN": 64, "BK": 256, "STAGES": 4, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 8, "PERSIST": 0, "CONSUMERS": 2, "PROMOTE": 1, "SCRATCH": 2},
                {"BM": 128, "BN": 128, "BK": 256, "STAGES": 4, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 4, "PERSIST": 0, "CONSUMERS": 2, "PROMOTE": 4, "SCRATCH": 2},
                {"BM": 256, "BN": 64, "BK": 128, "STAGES": 6, "LAG": 1, "CLUSTER": 2, "INFLIGHT": 0, "BTMA": 1, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2, "PROMOTE": 1, "SCRATCH": 2},
                {"BM": 256, "BN": 128, "BK": 128, "STAGES": 6, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 8, "PERSIST": 1, "CONSUMERS": 2, "PROMOTE": 2, "SCRATCH": 1}]


@pytest.mark.gpu
@pytest.mark.parametrize(("dtype", "kernel_name", "variants"), [("fp16", "sp24_wgmma_sp", VARIANTS),
                                                                ("bf16", "sp24_wgmma_sp", VARIANTS),
                                                                ("fp8_e4m3", "sp24_wgmma_sp_fp8", FP8_VARIANTS)])
def test_cluster_and_in_flight_variants_are_correct_and_clean(dtype, kernel_name, variants):
    from sparseditto.tools.device import detect

    arch = (detect().gpu or {}).get("arch", "sm_90a")
    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": 528, "K": 1088, "N": 400, "dtype": dtype,
                       "arch": "sm_90a", "epilogue": {"bias": True, "activation": "relu", "alpha": True}})
    kernel = get_kernel(kernel_name)
    candidates = [kernel.instantiate(p) for p in variants]
    verifier = GpuVerifier(arch=arch, trials=3, timeout_s=120, runs=5, sanitize=True, profile=False)
    for i, candidate in enumerate(candidates):
        report = verifier.verify(candidate, spec, ahead=candidates[1:] if i == 0 else ())
        feedback = [(f.stage, f.status, f.message) for f in report.feedback]
        assert report.correct and report.measurement is not None, (candidate.label(), feedback)
        sanitizer = report.stage("sanitizer")
        assert sanitizer is not None and sanitizer.status in {"passed", "not_executed"}, (candidate.label(), feedback)
