"""The CuTe fixture family: its wgmma tile product compiles on a machine without a CUDA toolkit (NVRTC and
the pinned header wheels), uses Hopper's tensor-core instructions, and (on a GPU) is correct.

The CPU test is the CI proof; the GPU test runs the same kernel through the verification harness.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparseditto.tools.compiler import compile_source
from sparseditto.tools.sass import analyse_cubin
from sparseditto.tools.source_check import check_compiled, check_source

FAMILY_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "families" / "cute_tile_gemm"
KERNEL = FAMILY_DIR / "kernels" / "cute_gemm_wgmma_ss.cu"
ENTRY = "cute_gemm_wgmma_ss"


@pytest.fixture(scope="module")
def compiled():
    """One compile (about 10-15 s on two cores) shared by the checks below."""
    return compile_source(KERNEL.read_text(), "sm_90a", ["-DBN=128"], name=KERNEL.name)


def test_cute_kernel_source_passes_the_static_check():
    assert check_source(KERNEL.read_text()) == []


def test_cute_kernel_compiles_for_sm90a_with_its_resources_reported(compiled):
    assert compiled.ok, compiled.log[-2000:]
    res = compiled.resources[ENTRY]
    assert 0 < res.registers <= 255
    assert (res.stack_bytes, res.spill_stores, res.spill_loads) == (0, 0, 0)


def test_cute_kernel_runs_on_wgmma_and_holds_nothing_refused(compiled):
    counts = analyse_cubin(compiled.cubin)
    assert isinstance(counts, dict), counts
    # BN=128, BK=64: four 64x128x16 wgmma per k step, fed by 16-byte cp.async copies
    assert counts[ENTRY].tensor_core == 4
    assert counts[ENTRY].async_copies > 0
    assert counts[ENTRY].local_loads == counts[ENTRY].local_stores == 0
    assert check_compiled(compiled) == []  # its PTX and SASS


@pytest.fixture
def cute_family(monkeypatch):
    monkeypatch.setenv("SPARSEDITTO_FAMILY_PATH", str(FAMILY_DIR))
    from sparseditto.tools.families import get_family

    return get_family("cute_tile_gemm")


def test_the_family_loads_from_its_folder_with_an_exact_reference(cute_family):
    import numpy as np

    from sparseditto.errors import SpecError
    from sparseditto.spec import parse_spec

    spec = parse_spec({"family": "cute_tile_gemm", "M": 128, "N": 256, "K": 192})
    problem = cute_family.make_problem(spec, seed=1)
    assert problem.inputs["A"].dtype == problem.inputs["B"].dtype == np.float16
    assert problem.outputs["C"].dtype == "fp32" and problem.outputs["C"].shape == (128, 256)
    ref = cute_family.reference(problem)["C"]
    assert ref.dtype == np.float64
    assert np.array_equal(ref, problem.inputs["A"].astype(np.float64) @ problem.inputs["B"].astype(np.float64))
    with pytest.raises(SpecError, match="multiples of 64"):
        parse_spec({"family": "cute_tile_gemm", "M": 100, "N": 256, "K": 64})


@pytest.mark.gpu
def test_cute_kernel_is_correct_on_the_gpu(cute_family):
    from sparseditto.knowledge_base.library import reference_kernels
    from sparseditto.spec import parse_spec
    from sparseditto.tools.verifier import GpuVerifier

    (kernel,) = [k for k in reference_kernels() if k.name == ENTRY]
    spec = parse_spec({"family": "cute_tile_gemm", "M": 1024, "N": 512, "K": 768, "arch": "sm_90a"})
    report = GpuVerifier(arch="sm_90a", sanitize=False, profile=False).verify(kernel.instantiate({"BN": 128}), spec)
    assert report.correct, [f.model_dump() for f in report.feedback]
