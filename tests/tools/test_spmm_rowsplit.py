"""Row-split SpMM with a group of LANES lanes per row: it compiles at every group width, the planner starts it with
groups that cover N with 16-byte loads, the cost model prices idle lanes and narrow loads as measured, prices the
shared-memory tile's staging of all of B so that it is never ranked first at large K, and on the GPU it is correct
(and clean under compute-sanitizer) when the groups of one warp run rows of very different lengths."""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.families import get_family
from sparseditto.tools.families.csr_spmm.cost import predicted_us

from compile_checks import verify_compile_only


def spmm_spec(dtype: str, n: int, distribution: str = "power_law", rows: int = 3001):
    return parse_spec({"operation": "spmm", "pattern": {"distribution": distribution, "nnz_per_row": 12},
                       "M": rows, "K": rows, "N": n, "dtype": dtype})


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_kernel_compiles_without_spills_at_every_group_width(dtype):
    kernel = get_kernel("spmm_csr_rowsplit")
    vw = 4 if dtype == "fp32" else 8
    for lanes in (4, 8, 16, 32):
        verify_compile_only(kernel.instantiate({"VW": vw, "LANES": lanes, "WARPS": 4, "UNROLL": 4}),
                            spmm_spec(dtype, 128), ("spmm_csr_rowsplit",))


def test_idle_lanes_and_narrow_loads_are_priced_as_measured():
    """N = 32 fp32 on a 10M-nonzero band: a warp per row took 750, 446 and 287 us at VW 4, 2 and 1 (session 18), 8
    lanes a row at VW 4 243.8 us (session 19)."""
    f = {"nnz": 10e6, "rows": 500e3, "cols": 500e3, "row_max": 40.0}
    us = {vw: predicted_us("spmm_csr_rowsplit", {"VW": vw, "LANES": 32, "UNROLL": 8}, f, 32, 4) for vw in (4, 2, 1)}
    for vw, measured in ((4, 750.4), (2, 446.5)):
        assert us[vw] / us[1] == pytest.approx(measured / 287.1, rel=0.1)
    eight_lanes = predicted_us("spmm_csr_rowsplit", {"VW": 4, "LANES": 8, "UNROLL": 8}, f, 32, 4)
    assert eight_lanes / us[1] == pytest.approx(243.8 / 287.1, rel=0.1)


def test_the_shared_memory_tile_is_priced_by_staging_all_of_b_in_every_block():
    family = get_family("csr_spmm")
    tall = spmm_spec("fp32", 128, "uniform", rows=200_000)
    ranked = family.strategies(tall, family.features(tall))
    smem = next(s for s in ranked if s.kernel == "spmm_csr_smem_tile")
    rowsplit = next(s for s in ranked if s.kernel == "spmm_csr_rowsplit")
    assert ranked[-1].kernel == "spmm_csr_smem_tile" and smem.predicted_us > 20 * rowsplit.predicted_us


@pytest.mark.gpu
@pytest.mark.parametrize(("dtype", "n", "lanes", "sanitize"), [("fp32", 32, 8, True), ("fp32", 200, 16, False),
                                                             ("fp16", 32, 4, True), ("bf16", 128, 32, False)])
def test_it_is_correct_when_the_groups_of_a_warp_run_rows_of_different_lengths(dtype, n, lanes, sanitize):
    """Power-law rows (lengths from 1 to hundreds) side by side in one warp, N no multiple of the group's columns at
    N = 200, and a last warp whose groups past M leave early."""
    from sparseditto.tools.device import detect
    from sparseditto.tools.verifier import GpuVerifier

    arch = (detect().gpu or {}).get("arch", "sm_90")
    vw = 4 if dtype == "fp32" else 8
    candidate = get_kernel("spmm_csr_rowsplit").instantiate({"VW": vw, "LANES": lanes, "WARPS": 4, "UNROLL": 4})
    report = GpuVerifier(arch=arch, trials=3, timeout_s=180, runs=5, sanitize=sanitize,
                         profile=False).verify(candidate, spmm_spec(dtype, n))
    assert report.correct and report.measurement is not None, [(f.stage, f.status, f.message) for f in report.feedback]
    if sanitize:
        assert report.stage("sanitizer").status == "passed", report.stage("sanitizer").message
