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


def test_a_header_with_body_from_takes_that_files_code_and_holds_none_of_its_own(tmp_path):
    import pytest

    from sparseditto.knowledge_base.library import _parse, get_kernel

    fp8, code = get_kernel("sp24_wgmma_sp_fp8"), get_kernel("sp24_wgmma_sp")
    assert fp8.body == code.body and fp8.dtypes == ("fp8_e4m3",) and fp8.kernels[0].entry == "sp24w_transpose_b"
    header = fp8.path.read_text()
    (tmp_path / "sp24_wgmma_sp_fp8.cu").write_text(header + "__global__ void extra() {}\n")
    with pytest.raises(ValueError, match="must hold none of its own"):
        _parse(tmp_path / "sp24_wgmma_sp_fp8.cu", "sparse24_gemm")
    (tmp_path / "sp24_wgmma_sp_fp8.cu").write_text(header)  # no sp24_wgmma_sp.cu beside it
    with pytest.raises(ValueError, match="no kernel file with code"):
        _parse(tmp_path / "sp24_wgmma_sp_fp8.cu", "sparse24_gemm")
