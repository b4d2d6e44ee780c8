"""Kernel contract v2: every launch check's rejection, typed arguments, tensor maps, clusters, the peak rates of
the timing floor, and the fixture family's TMA + cluster + fp8 kernel (compiled here, verified on a GPU)."""

from __future__ import annotations

import ctypes
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml

from sparseditto.tools.compiler import KernelResources
from sparseditto.tools.contract import KernelCandidate, KernelLaunch, ScalarArg, TensorMap, Workspace
from sparseditto.tools.families import FAMILY_PATH_ENV
from sparseditto.tools.kernel_launch import KernelParams
from sparseditto.tools.launch_check import (
    MAX_WORKSPACE_BYTES,
    DeviceLimits,
    KernelArg,
    LaunchRejected,
    plan_launch,
)
from sparseditto.tools.peaks import peak_flops
from sparseditto.tools.tensormap import ArrayInfo, TensorMapError, plan_tensor_map

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "families" / "contract_v2_demo"
KERNEL_FILE = FIXTURE / "kernels" / "demo_tma_cluster_scale.cu"
PRELUDE = Path(__file__).resolve().parents[2] / "knowledge_base" / "kernels" / "prelude.cuh"
H200 = DeviceLimits.for_arch("sm_90")
SYMBOLS = {"M": 300, "K": 256, "value_bytes": 2, "num_sms": 132}
ARRAYS = {"A": ArrayInfo((300, 256), "fp8_e4m3", 1), "Y": ArrayInfo((300, 256), "fp16", 2),
          "rowsum": ArrayInfo((300,), "fp32", 4)}
SCALARS = {"scale": 1.5}


def launch(**fields) -> KernelLaunch:
    return KernelLaunch(**{"entry": "k", "grid": ("ceil_div(M, 64)", "1", "1"), "block": ("128", "1", "1"),
                           "args": ("Y", "M"), **fields})


def candidate(*launches: KernelLaunch, **fields) -> KernelCandidate:
    return KernelCandidate(name="c", family="contract_v2_demo", source="", kernels=launches or (launch(),), **fields)


def plan(c: KernelCandidate, resources=None, limits=H200, symbols=SYMBOLS, arrays=ARRAYS):
    return plan_launch(c, symbols, SCALARS, arrays, "fp16", limits, resources)


def rejected(c: KernelCandidate, **kw) -> LaunchRejected:
    with pytest.raises(LaunchRejected) as info:
        plan(c, **kw)
    return info.value


# ---- every rejection has its own error type ------------------------------------------------------------------

@pytest.mark.parametrize(
    ("bad", "error_type", "words"),
    [
        (candidate(launch(grid=("ceil_div(M, TILE)", "1", "1"))), "invalid_expression", "TILE"),
        (candidate(launch(shared_bytes="M // 0")), "invalid_expression", "division by zero"),
        (candidate(launch(block=("M < 2", "1", "1"))), "invalid_expression", "condition"),
        (candidate(workspace={"w": Workspace(dtype="fp32", size="2 ** M")}), "invalid_expression", "allowed"),
        (candidate(launch(block=("2048", "1", "1"))), "block_limit", "1024 threads"),
        (candidate(launch(block=("1", "1", "128"))), "block_limit", "(1, 1, 128)"),
        (candidate(launch(block=("0", "1", "1"))), "block_limit", "at least 1"),
        (candidate(launch(grid=("M - M", "1", "1"))), "grid_limit", "at least 1"),
        (candidate(launch(grid=("1", "70000", "1"))), "grid_limit", "65535"),
        (candidate(launch(grid=("2147483648", "1", "1"))), "grid_limit", "2147483648"),
        (candidate(launch(grid=("3", "1", "1"), cluster=("2", "1", "1"))), "cluster_shape", "does not divide"),
        (candidate(launch(grid=("16", "1", "1"), cluster=("16", "1", "1"))), "cluster_shape", "portable"),
        (candidate(launch(grid=("4", "1", "1"), cluster=("0", "1", "1"))), "cluster_shape", "at least 1"),
        (candidate(launch(shared_bytes="228 * 1024")), "shared_memory_limit", "227 KiB"),
        (candidate(launch(shared_bytes="0 - 1")), "shared_memory_limit", "-1 dynamic"),
        (candidate(workspace={"w": Workspace(dtype="fp32", size="M * K * K * K")}), "workspace_limit", "GiB cap"),
        (candidate(workspace={"w": Workspace(dtype="int32", size="0 - M")}), "workspace_limit", "negative"),
        (candidate(launch(args=("Y", "host_pointer"))), "unknown_argument", "host_pointer"),
        (candidate(launch(args=(ScalarArg(name="alpha", type="float32"),))), "unknown_argument", "alpha"),
        (candidate(launch(args=(ScalarArg(name="M", type="float32"),))), "argument_type", "integer symbol"),
        (candidate(launch(args=(ScalarArg(name="scale", type="int32"),))), "argument_type", "float scalar"),
        (candidate(launch(args=(ScalarArg(name="Y", type="int64"),))), "argument_type", "array"),
        (candidate(tensor_maps={"t": TensorMap(array="B", box=("64", "64"))}), "tensor_map_invalid", "'B'"),
        (candidate(tensor_maps={"t": TensorMap(array="A", box=("8", "64"))}), "tensor_map_invalid", "multiple of 16"),
        (candidate(tensor_maps={"t": TensorMap(array="A", box=("BOX", "64"))}), "invalid_expression", "BOX"),
    ],
)
def test_each_resource_failure_is_a_rejection_with_its_type(bad, error_type, words):
    exc = rejected(bad)
    assert exc.error_type == error_type
    assert words in exc.message


def test_static_plus_dynamic_shared_memory_counts():
    c = candidate(launch(shared_bytes="200 * 1024"))
    plan(c, resources={"k": KernelResources(shared_bytes=20 * 1024)})
    exc = rejected(c, resources={"k": KernelResources(shared_bytes=30 * 1024)})
    assert exc.error_type == "shared_memory_limit" and "30720 bytes static" in exc.message
    assert rejected(c, limits=DeviceLimits.for_arch("sm_80")).error_type == "shared_memory_limit"


def test_registers_times_threads():
    c = candidate(launch(block=("1024", "1", "1")))
    plan(c, resources={"k": KernelResources(registers=64)})  # 64 x 1024 = 64K: fits exactly
    exc = rejected(c, resources={"k": KernelResources(registers=65)})  # rounds up to 72 per thread
    assert exc.error_type == "register_limit" and "65 registers x 1024 threads" in exc.message


def test_clusters_and_tensor_maps_need_sm90():
    clustered = candidate(launch(grid=("4", "1", "1"), cluster=("2", "1", "1")))
    plan(clustered)
    assert rejected(clustered, limits=DeviceLimits.for_arch("sm_80")).error_type == "cluster_shape"
    mapped = candidate(tensor_maps={"t": TensorMap(array="A", box=("64", "64"))})
    assert rejected(mapped, limits=DeviceLimits.for_arch("sm_89")).error_type == "tensor_map_invalid"


def test_workspace_cap_is_on_the_total():
    each = MAX_WORKSPACE_BYTES // 4 // 2 + 1  # fp32 elements: two of them just exceed the cap
    ok = candidate(workspace={"a": Workspace(dtype="fp32", size=str(each))})
    plan(ok)
    both = candidate(workspace={"a": Workspace(dtype="fp32", size=str(each)), "b": Workspace(dtype="fp32", size=str(each))})
    assert rejected(both).error_type == "workspace_limit"


def test_int32_arguments_must_fit():
    big = {**SYMBOLS, "nnz": 3_000_000_000}
    assert rejected(candidate(launch(args=("nnz",))), symbols=big).error_type == "argument_type"
    p = plan(candidate(launch(args=(ScalarArg(name="nnz", type="int64"),))), symbols=big)
    assert p.args[0] == [KernelArg("nnz", "int64", 3_000_000_000)]


# ---- typed arguments --------------------------------------------------------------------------------------------

def test_argument_kinds_are_inferred_or_declared():
    c = candidate(launch(args=("t", "Y", "w", "M", "BM", "scale", ScalarArg(name="K", type="int64"))),
                  parameters={"BM": 64}, workspace={"w": Workspace(dtype="value", size="M")},
                  tensor_maps={"t": TensorMap(array="A", box=("64", "BM"))})
    p = plan(c)
    assert [(a.name, a.kind, a.value) for a in p.args[0]] == [
        ("t", "tensor_map", None), ("Y", "pointer", None), ("w", "pointer", None), ("M", "int32", 300),
        ("BM", "int32", 64), ("scale", "float32", 1.5), ("K", "int64", 256)]
    assert p.workspace_dtypes == {"w": "fp16"} and p.workspace_sizes == {"w": 300}


def test_kernel_params_hold_each_argument_as_the_kernel_receives_it():
    args = [KernelArg("t", "tensor_map"), KernelArg("Y", "pointer"), KernelArg("scale", "float32", 1.5),
            KernelArg("M", "int32", -7), KernelArg("K", "int64", 2**40 + 3)]
    encoded = bytes(range(128))
    params = KernelParams(args, {"Y": 0xDEAD0000}, {"t": encoded})
    assert params.raw(0) == encoded
    assert struct.unpack("<Q", params.raw(1))[0] == 0xDEAD0000
    assert struct.unpack("<f", params.raw(2))[0] == 1.5
    assert struct.unpack("<i", params.raw(3))[0] == -7
    assert struct.unpack("<q", params.raw(4))[0] == 2**40 + 3
    pointers = (ctypes.c_void_p * 5).from_address(params.address)
    assert [pointers[i] for i in range(5)] == [ctypes.addressof(v) for v in params.values]


# ---- tensor maps ---------------------------------------------------------------------------------------------------

def tmap(**fields) -> TensorMap:
    return TensorMap(**{"array": "A", "box": ("BK", "BM"), **fields})


ENV = {"M": 300, "K": 256, "BK": 64, "BM": 32}
A = ArrayInfo((300, 256), "fp8_e4m3", 1)


def test_a_tensor_map_defaults_to_the_arrays_shape():
    p = plan_tensor_map("t", tmap(), A, ENV)
    assert (p.data_type, p.dims, p.strides, p.box, p.element_strides) == ("UINT8", (256, 300), (256,), (64, 32), (1, 1))
    half = plan_tensor_map("t", tmap(), ArrayInfo((300, 256), "bf16", 2), ENV)
    assert half.data_type == "BFLOAT16" and half.strides == (512,)


def test_a_flat_array_viewed_as_a_tensor():
    flat = ArrayInfo((300 * 256,), "fp32", 4)
    p = plan_tensor_map("t", tmap(array="w", dims=("K", "M"), strides=("K * 4",)), flat, ENV)
    assert p.dims == (256, 300) and p.strides == (1024,)


@pytest.mark.parametrize(
    ("fields", "array", "words"),
    [
        ({"box": ("BK", "BM", "1")}, A, "give dims"),
        ({"box": ("512", "BM")}, A, "between 1 and 256"),
        ({"box": ("0", "BM")}, A, "between 1 and 256"),
        ({"box": ("8", "BM")}, A, "multiple of 16"),
        ({"box": ("BK", "BM"), "swizzle": "32B"}, A, "more than the 32B swizzle"),
        ({"element_strides": ("1", "9")}, A, "element strides"),
        ({"dims": ("K", "M"), "strides": ("K + 8",)}, A, "multiples of 16"),
        ({"dims": ("K", "M + 1"), "strides": ("K",)}, A, "reach"),
        ({"dims": ("0", "M"), "strides": ("K",)}, A, "dims"),
        ({"oob_fill": "nan"}, A, "NaN fill"),
        ({}, ArrayInfo((300, 250), "fp8_e4m3", 1), "multiples of 16"),
        ({}, ArrayInfo((300, 256), "complex64", 8), "cannot be copied"),
    ],
)
def test_tensor_maps_the_driver_would_refuse(fields, array, words):
    with pytest.raises(TensorMapError, match=words):
        plan_tensor_map("t", tmap(**fields), array, ENV)


def test_swizzle_fits_its_span():
    p = plan_tensor_map("t", tmap(box=("128", "BM"), swizzle="128B"), A, ENV)
    assert p.swizzle == "128B" and p.box == (128, 32)


# ---- the floor's peak rates ----------------------------------------------------------------------------------------

def test_peak_rates_come_from_the_device():
    h200 = peak_flops(90, 132, 1_980_000, ["fp16"])
    assert h200 == pytest.approx(4096 * 132 * 1.98e9)  # 1070 TFLOP/s, above the 989 of the datasheet at 1.83 GHz
    assert peak_flops(90, 132, 1_980_000, ["fp8_e4m3", "int32"]) == 2 * h200  # the narrowest operand sets the rate
    assert peak_flops(90, 132, 1_980_000, ["fp32", "int32"]) == h200 / 2  # tf32 tensor cores
    assert peak_flops(90, 66, 1_980_000, ["fp16"]) == h200 / 2  # a smaller part of the same architecture
    # a GPU newer or older than the table is never given a rate below the newest / oldest known one
    assert peak_flops(120, 132, 1_980_000, ["fp16"]) > peak_flops(100, 132, 1_980_000, ["fp16"])
    assert peak_flops(75, 40, 1_590_000, ["fp16"]) == peak_flops(80, 40, 1_590_000, ["fp16"])


# ---- the fixture family: fp8 through a tensor map, a cluster launch, a float scalar, two outputs ------------------

@pytest.fixture
def demo_family(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(FAMILY_PATH_ENV, str(FIXTURE))
    return FIXTURE


def demo_candidate(params: dict[str, int]) -> KernelCandidate:
    """The candidate the way a reference-kernel header declares it: prelude plus body, the header's contract."""
    text = KERNEL_FILE.read_text()
    header = re.match(r"^/\*---\n(.*?)\n---\*/\n", text, re.S)
    meta = yaml.safe_load(header.group(1))
    return KernelCandidate(name=meta["name"], family=meta["family"], source=PRELUDE.read_text() + "\n" + text[header.end():],
                           parameters=params, kernels=meta["kernels"], tensor_maps=meta["tensor_maps"],
                           accumulate=meta["accumulate"])


def demo_spec(**fields):
    from sparseditto.spec import parse_spec

    return parse_spec({"name": "demo", "family": "contract_v2_demo", "operation": "scale_rowsum", "M": 1000, "K": 1008,
                       "dtype": "fp16", **fields})


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_the_fixture_kernel_compiles_and_passes_the_launch_checks(demo_family, dtype):
    from sparseditto.tools.verifier import CompileOnlyVerifier

    report = CompileOnlyVerifier(arch="sm_90a").verify(demo_candidate({"BM": 64, "BK": 128}), demo_spec(dtype=dtype))
    assert report.compiled, report.stage("compile").message
    assert report.resources["scale_rowsum"].shared_bytes >= 64 * 128  # the TMA tile is static shared memory
    assert report.stage("launch") is None  # no rejection
    assert report.stage("correctness").status == "not_executed"


def test_the_fixture_candidate_is_rejected_where_its_resources_do_not_fit(demo_family):
    from sparseditto.tools.verifier import CompileOnlyVerifier

    c = demo_candidate({"BM": 64, "BK": 128})
    bad_box = c.model_copy(update={"tensor_maps": {"tmap_A": TensorMap(array="A", box=("BK * 4", "BM"))}})
    fb = CompileOnlyVerifier(arch="sm_90a").verify(bad_box, demo_spec()).stage("launch")
    assert fb.status == "failed" and fb.error_type == "tensor_map_invalid" and "256" in fb.message
    odd_grid = c.model_copy(update={"kernels": (c.kernels[0].model_copy(update={"grid": ("2 * ceil_div(M, BM) + 1", "1", "1")}),)})
    fb = CompileOnlyVerifier(arch="sm_90a").verify(odd_grid, demo_spec()).stage("launch")
    assert fb.error_type == "cluster_shape"


def test_the_fixture_problem_is_exact_from_the_rounded_inputs(demo_family):
    from sparseditto.tools.dtypes import to_float64
    from sparseditto.tools.families import get_family

    family = get_family("contract_v2_demo")
    problem = family.make_problem(demo_spec(), seed=3, shape={"M": 5, "K": 32})
    ref = family.reference(problem)
    a = to_float64(problem.inputs["A"], "fp8_e4m3")
    assert problem.inputs["A"].dtype == np.uint8 and problem.input_dtypes == {"A": "fp8_e4m3"}
    assert {n: o.dtype for n, o in problem.outputs.items()} == {"Y": "fp16", "rowsum": "fp32"}
    assert np.array_equal(ref["Y"], problem.scalars["scale"] * a)
    assert np.allclose(ref["rowsum"], ref["Y"].sum(axis=1), rtol=0, atol=1e-12)


def test_run_jobs_carry_the_family_spec_through_json(demo_family):
    from sparseditto.tools.runner import RunJob

    job = RunJob(candidate=demo_candidate({"BM": 64, "BK": 128}), spec=demo_spec(), cubin_path="x", seeds=[1],
                 held_out_shapes=[], timing_seed=2, resources={"scale_rowsum": KernelResources(registers=32)})
    back = RunJob.model_validate_json(job.model_dump_json())
    assert type(back.spec).__name__ == "DemoSpec" and back.spec.K == 1008
    assert back.candidate == job.candidate and back.resources == job.resources


@pytest.mark.gpu
def test_contract_v2_on_the_gpu(demo_family):
    """TMA tensor map by value, a 2-CTA cluster with distributed shared memory, an fp8 operand, a float32 scalar,
    an int64 argument and two outputs of different dtypes, verified by the harness like any candidate."""
    from sparseditto.tools.verifier import GpuVerifier

    report = GpuVerifier(arch="sm_90a", profile=False).verify(demo_candidate({"BM": 64, "BK": 128}), demo_spec())
    print(report.model_dump_json(indent=1, exclude={"sass"}))
    assert report.stage("correctness").status == "passed", report.stage("correctness") or report.feedback[-1]
    assert len(report.trials) >= 4 and all(set(t.errors) == {"Y", "rowsum"} for t in report.trials)
    assert any(t.held_out for t in report.trials)
    assert report.stage("benchmark").status == "passed" and report.measurement.median_us > 0
