"""Which reference kernels run on which GPU, and the target an arch-specific one is compiled for."""

from __future__ import annotations


def test_arch_specific_kernels_run_on_their_own_compute_capability_and_compile_for_its_target():
    from sparseditto.knowledge_base.library import get_kernel, runs_on

    assert runs_on("sm_90", ["sm_80"]) and runs_on("sm_100", ["sm_80"]) and not runs_on("sm_80", ["sm_90"])
    assert runs_on("sm_90", ["sm_90a"]) and not runs_on("sm_100", ["sm_90a"]) and not runs_on("sm_80", ["sm_90a"])
    wgmma = get_kernel("sp24_wgmma_sp")
    candidate = wgmma.instantiate({name: values[0] for name, values in wgmma.parameters.items()})
    assert candidate.arch_specific and candidate.compile_arch("sm_90") == "sm_90a"
    plain = get_kernel("spmv_csr_vec4")
    assert plain.instantiate({n: v[0] for n, v in plain.parameters.items()}).compile_arch("sm_90") == "sm_90"
