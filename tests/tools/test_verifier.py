"""The compile-only backend: compiles, keeps ptxas's report, and never reports a GPU stage as passed."""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.library import get_kernel, prelude
from sparseditto.tools.contract import KernelCandidate, KernelLaunch, Workspace
from sparseditto.tools.results import NOT_EXECUTED_NO_GPU
from sparseditto.spec import parse_spec
from sparseditto.tools.verifier import CompileOnlyVerifier, GpuVerifier, make_verifier

GPU_STAGES = ("correctness", "sanitizer", "benchmark", "profile")


def rowsplit():
    return get_kernel("spmm_csr_rowsplit").instantiate({"VW": 4, "LANES": 8, "WARPS": 4, "UNROLL": 8})


def hand_made(body: str, block: str = "256") -> KernelCandidate:
    return KernelCandidate(
        name="hand_made", family="csr_spmm", source=prelude() + body,
        kernels=[KernelLaunch(entry="k", grid=("ceil_div(M * N, 256)", "1", "1"), block=(block, "1", "1"),
                              args=("rowptr", "colind", "values", "B", "C", "M", "N"))],
    )


def test_compile_only_reports_gpu_stages_as_not_executed(tiny_spmm):
    report = CompileOnlyVerifier().verify(rowsplit(), tiny_spmm)
    assert report.backend == "compile_only"
    assert report.compiled
    assert report.stage("compile").status == "passed"
    assert report.resources["spmm_csr_rowsplit"].registers > 0
    for stage in GPU_STAGES:
        fb = report.stage(stage)
        assert fb is not None, stage
        assert fb.status == "not_executed"
        assert fb.message == NOT_EXECUTED_NO_GPU
    assert not any(f.status == "passed" for f in report.feedback if f.stage not in {"compile", "static"})
    assert report.stage("static").status == "passed"  # the SASS mix needs no GPU
    assert report.sass["spmm_csr_rowsplit"].global_loads > 0
    assert not report.correct
    assert report.measurement is None and report.trials == [] and report.baselines == []


def test_compile_only_uses_the_spec_arch(tiny_spmm):
    spec = tiny_spmm.model_copy(update={"arch": "sm_80"})
    report = CompileOnlyVerifier(arch="sm_90").verify(rowsplit(), spec)
    assert "sm_80" in report.stage("compile").message


def test_compile_error_is_a_failed_compile_stage(tiny_spmm):
    bad = hand_made('extern "C" __global__ void k(const int* rowptr) { this is not C++; }')
    report = CompileOnlyVerifier().verify(bad, tiny_spmm)
    assert not report.compiled
    fb = report.stage("compile")
    assert fb.status == "failed"
    assert fb.error_type == "compile_error"
    assert "error" in fb.message
    assert "\n" not in fb.message
    assert "log" in fb.evidence
    assert not any(f.status in {"passed", "not_executed"} for f in report.feedback if f.stage in GPU_STAGES)
    assert not report.correct


def test_launch_geometry_is_checked_without_a_gpu(tiny_spmm):
    body = ('extern "C" __global__ void k(const int* rowptr, const int* colind, const value_t* values,'
            ' const value_t* B, value_t* C, int M, int N) {}')
    report = CompileOnlyVerifier().verify(hand_made(body, block="2048"), tiny_spmm)
    assert report.compiled
    fb = report.stage("launch")
    assert fb.status == "failed" and fb.error_type == "block_limit"
    assert not report.correct


def test_too_much_shared_memory_is_a_shared_memory_rejection(tiny_spmm_dict):
    kernel = get_kernel("spmm_csr_smem_tile")
    big = kernel.instantiate({"LPR": 32, "WARPS": 4, "RPG": 1, "KC": 2048, "UNROLL": 2})  # 2048 rows * 512 B = 1 MiB
    report = CompileOnlyVerifier().verify(big, parse_spec({**tiny_spmm_dict, "K": 4096}))
    fb = report.stage("launch")
    assert fb is not None and fb.status == "failed" and fb.error_type == "shared_memory_limit"
    assert "shared memory" in fb.message


def test_the_shared_memory_limit_is_the_architectures(tiny_spmm_dict):
    """192 KiB fits a block on sm_90 (227 KiB) but not on sm_80 (163 KiB)."""
    kernel = get_kernel("spmm_csr_smem_tile").instantiate({"LPR": 8, "WARPS": 4, "RPG": 1, "KC": 1536, "UNROLL": 2})
    spec = parse_spec({**tiny_spmm_dict, "K": 4096, "N": 64})
    assert CompileOnlyVerifier().verify(kernel, spec.model_copy(update={"arch": "sm_90"})).stage("launch") is None
    fb = CompileOnlyVerifier().verify(kernel, spec.model_copy(update={"arch": "sm_80"})).stage("launch")
    assert fb is not None and fb.error_type == "shared_memory_limit" and "163 KiB" in fb.message


def test_forced_compile_only_verifier():
    verifier = make_verifier("sm_80", force_compile_only=True)
    assert isinstance(verifier, CompileOnlyVerifier)
    assert verifier.backend == "compile_only"
    assert verifier.arch == "sm_80"


def test_default_verifier_matches_the_machine(machine_has_gpu):
    verifier = make_verifier()
    assert isinstance(verifier, GpuVerifier if machine_has_gpu else CompileOnlyVerifier)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_sixteen_bit_candidates_compile(tiny_spmm, dtype):
    spec = tiny_spmm.model_copy(update={"dtype": dtype})
    report = CompileOnlyVerifier().verify(get_kernel("spmm_csr_rowsplit").instantiate({"VW": 8, "LANES": 4, "WARPS": 4, "UNROLL": 4}), spec)
    assert report.compiled and report.stage("compile").status == "passed"


def test_compile_errors_name_their_line(tiny_spmm):
    body = 'extern "C" __global__ void k(float* C) { C[0] = undefined_name; }\n'
    report = CompileOnlyVerifier().verify(hand_made(body), tiny_spmm)
    fb = report.stage("compile")
    assert fb.error_type == "compile_error" and "undefined_name" in fb.message
    assert fb.location and fb.location.startswith("line ")


def test_launch_arguments_must_be_what_the_runner_provides(tiny_spmm):
    body = 'extern "C" __global__ void k(float* C, const float* host_pointer) { C[0] = host_pointer[0]; }\n'
    bad = hand_made(body).model_copy(update={"kernels": (KernelLaunch(entry="k", grid=("1", "1", "1"), block=("32", "1", "1"),
                                                                       args=("C", "host_pointer")),)})
    fb = CompileOnlyVerifier().verify(bad, tiny_spmm).stage("launch")
    assert fb.error_type == "unknown_argument" and "host_pointer" in fb.message
    unknown = hand_made('extern "C" __global__ void k(float* C) { }\n').model_copy(update={"preparation": "no_such_step"})
    fb = CompileOnlyVerifier().verify(unknown, tiny_spmm).stage("launch")
    assert fb.error_type == "invalid_launch" and "no_such_step" in fb.message


def test_the_main_shape_is_checked_too(tiny_spmm):
    """A workspace that fits the tiny instance but not the spec's shape is refused before the GPU stages."""
    body = 'extern "C" __global__ void k(float* C, float* w) { }\n'
    big = hand_made(body).model_copy(update={"workspace": {"w": Workspace(dtype="fp32", size="M * M * M * N")}})
    fb = CompileOnlyVerifier().verify(big, tiny_spmm.model_copy(update={"M": 4096})).stage("launch")
    assert fb is not None and fb.error_type == "workspace_limit"


def test_registers_reported_by_ptxas_are_checked(tiny_spmm):
    """ptxas's register count times the block's threads must fit a block's 64K registers: a kernel that keeps
    128 values live, allowed 255 registers, cannot run 1024 threads per block."""
    body = ('extern "C" __global__ void k(float* C) {\n'
            '  float acc[128];\n#pragma unroll\n  for (int i = 0; i < 128; ++i) acc[i] = C[threadIdx.x * 128 + i];\n'
            '  float s = 0.f;\n#pragma unroll\n  for (int i = 0; i < 128; ++i) s += acc[i] * acc[127 - i] + acc[(i * 7) % 128];\n'
            '  C[threadIdx.x] = s; }\n')
    heavy = hand_made(body, block="1024").model_copy(update={"compile_options": ("--maxrregcount=255",)})
    report = CompileOnlyVerifier().verify(heavy, tiny_spmm)
    assert report.resources["k"].registers > 64
    fb = report.stage("launch")
    assert fb is not None and fb.error_type == "register_limit"
    assert report.stage("correctness") is None  # nothing is reported as run or not-run after a rejection
