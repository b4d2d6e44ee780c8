"""Launches declared `early` (programmatic dependent launch): the contract evaluates the flag, the launch check
keeps it to sm_90 and to launches after the first, and the compiled-code check refuses an early entry whose code
never waits for the launches before it. Whether the overlap is correct and faster is the GPU tests' business."""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.contract import KernelLaunch
from sparseditto.tools.launch_check import DeviceLimits, LaunchRejected, check_sizes
from sparseditto.tools.ptx_check import check_ptx
from sparseditto.tools.verifier import check_and_compile, early_launch_params


def merge_path(early: int):
    return get_kernel("spmv_merge_path").instantiate({"BLOCK": 256, "ITEMS": 8, "HINT": 1, "EARLY": early})


SYMBOLS = {"M": 1000, "K": 1000, "N": 1, "nnz": 9000, "n_tiles": 6, "n_fix": 3}


def spec():
    return parse_spec({"operation": "spmv", "pattern": {"distribution": "power_law", "nnz_per_row": 9},
                       "M": 3000, "K": 2000, "arch": "sm_90"})


def plan_geometry(candidate, arch: str):
    return check_sizes(candidate, SYMBOLS, "fp32", DeviceLimits.for_arch(arch))


def test_the_flag_follows_the_parameter():
    assert merge_path(0).early_entries() == set()
    assert merge_path(1).early_entries() == {"spmv_merge_fixup"}
    assert [g.early for g in merge_path(1).geometry(SYMBOLS)] == [False, True]


def test_an_early_launch_needs_a_launch_before_it_and_is_ordinary_before_sm_90():
    assert [g.early for g in plan_geometry(merge_path(1), "sm_90")] == [False, True]
    assert [g.early for g in plan_geometry(merge_path(1), "sm_80")] == [False, False]
    first = merge_path(1)
    launches = list(first.kernels)
    first = first.model_copy(update={"kernels": (launches[0].model_copy(update={"early": "1"}), launches[1])})
    with pytest.raises(LaunchRejected) as leading:
        check_sizes(first, SYMBOLS, "fp32", DeviceLimits.for_arch("sm_90"))
    assert leading.value.error_type == "early_launch" and "first launch" in leading.value.message


def split_vec4(early: int):
    return get_kernel("spmv_csr_split_vec4").instantiate({"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1,
                                                          "LONG_ROW": 64, "CHUNK": 1024, "EARLY": early})


@pytest.mark.parametrize("make", [merge_path, split_vec4])
def test_each_kernel_with_an_early_launch_compiles_clean_with_its_wait(make):
    candidate = make(1)
    (entry,) = candidate.early_entries()
    assert entry == candidate.kernels[1].entry and make(0).early_entries() == set()
    result, feedback, _ = check_and_compile(candidate, spec(), "sm_90")
    assert result is not None and result.ok
    assert not [f for f in feedback if f.status in {"failed", "error"}], feedback
    assert all(r.spill_stores == 0 and r.stack_bytes == 0 for r in result.resources.values()), result.resources


WAIT = "    if (EARLY) sd_wait_earlier_launches();\n"
RETURN = "    if (f >= n_fix) return;  // whole warps leave together\n"
ACC = "    float acc = 0.f;\n    // through L2"  # the fix-up's
# merge path's fix-up changed in the ways an early entry can go wrong: each is refused by its compiled code
BROKEN = {
    "no_wait": lambda src: src.replace(WAIT, ""),
    "wait_that_never_runs": lambda src: src.replace(WAIT, "    if (n_fix < -7) sd_wait_earlier_launches();\n"),
    "return_before_the_wait": lambda src: src.replace(WAIT + RETURN, RETURN + WAIT),
    "read_before_the_wait": lambda src: src.replace(WAIT, "    const float peek = f < n_fix ? tile_carry[first] : 0.f;\n"
                                                    + WAIT).replace(ACC, "    float acc = peek - peek;\n    // through L2"),
    "write_before_the_wait": lambda src: src.replace(WAIT, "    if (f < n_fix && lane == 0) y[row] = sd_from_f32(0.f);\n" + WAIT),
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_an_early_entry_that_does_not_wait_first_is_refused_by_its_compiled_code(broken):
    candidate = merge_path(1)
    changed = candidate.model_copy(update={"source": BROKEN[broken](candidate.source)})
    assert changed.source != candidate.source
    result, feedback, _ = check_and_compile(changed, spec(), "sm_90")
    refused = [f for f in feedback if f.status == "failed"]
    assert [(f.error_type, f.evidence["entry"]) for f in refused] == [("early_launch", "spmv_merge_fixup")], feedback
    assert check_ptx(result.ptx) == []  # the same code launched in order breaks no other rule


def test_the_reference_fix_up_waits_on_every_path_before_its_reads_and_writes():
    guarded = early_launch_params(merge_path(1), spec(), "sm_90")
    assert guarded == {"spmv_merge_fixup": {1, 2, 5}}  # tile_carry, tile_head, y: what a launch writes
    result, feedback, _ = check_and_compile(merge_path(1), spec(), "sm_90")
    assert check_ptx(result.ptx, guarded) == []
    # its reads of the preparation's arrays before the wait are allowed; counted as written, they are refused
    assert check_ptx(result.ptx, {"spmv_merge_fixup": {0, 3, 4}})[0].error_type == "early_launch"
    # the tiles entry never waits: launched early it would be refused
    assert check_ptx(result.ptx, {"spmv_merge_tiles": set()})[0].evidence["entry"] == "spmv_merge_tiles"


def test_before_sm_90_an_early_launch_is_ordinary_and_needs_no_wait():
    for make in (merge_path, split_vec4):
        result, feedback, _ = check_and_compile(make(1), spec(), "sm_80")
        assert result is not None and result.ok
        assert not [f for f in feedback if f.status in {"failed", "error"}], feedback
        assert "griddepcontrol" not in result.ptx


def test_a_launch_declares_early_as_an_expression_or_a_yaml_boolean():
    def launch(**early) -> KernelLaunch:
        return KernelLaunch(entry="k", grid=("1", "1", "1"), block=("32", "1", "1"), args=(), **early)

    assert launch(early="EARLY").early == "EARLY" and launch().early == "0"
    assert launch(early=True).early == "1" and launch(early=False).early == "0"


@pytest.mark.gpu
@pytest.mark.parametrize("make", [merge_path, split_vec4])
def test_a_kernel_with_its_second_launch_early_is_correct_and_clean_on_the_gpu(make):
    """Correct on fresh inputs and held-out shapes, every timed run checked, and clean under compute-sanitizer's
    four tools with the early launch in the sequence (the split kernel's CHUNK 1024 gives rows of several chunks,
    so its second launch has sums to add)."""
    from sparseditto.tools.device import detect
    from sparseditto.tools.verifier import GpuVerifier

    arch = (detect().gpu or {}).get("arch", "sm_90")
    if int(arch.removeprefix("sm_").rstrip("a")) < 90:
        pytest.skip(f"an early launch needs sm_90, the device is {arch}")
    skewed = parse_spec({"operation": "spmv", "pattern": {"distribution": "power_law", "nnz_per_row": 12},
                         "M": 20011, "K": 20011})
    report = GpuVerifier(arch=arch, trials=3, timeout_s=180, runs=10, profile=False).verify(make(1), skewed)
    assert report.correct and report.measurement is not None, [(f.stage, f.status, f.message) for f in report.feedback]
    assert report.stage("sanitizer").status == "passed", report.stage("sanitizer").message


def test_the_driver_launch_carries_the_attribute_only_for_an_early_launch():
    from types import SimpleNamespace

    from cuda.bindings import driver as drv

    from sparseditto.tools.contract import Geometry
    from sparseditto.tools.kernel_launch import DriverLaunch, KernelParams

    function = SimpleNamespace(kernel=SimpleNamespace(ptr=0))
    params = KernelParams([], {}, {})
    kinds = {}
    for early, cluster in ((False, (1, 1, 1)), (True, (1, 1, 1)), (True, (2, 1, 1))):
        geometry = Geometry(entry="k", grid=(2, 1, 1), block=(32, 1, 1), cluster=cluster, shared_bytes=0, early=early)
        config = DriverLaunch(function, geometry, params).config
        kinds[(early, cluster)] = [a.id for a in config.attrs][:config.numAttrs]
    serialization = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert kinds[(False, (1, 1, 1))] == []
    assert kinds[(True, (1, 1, 1))] == [serialization]
    assert kinds[(True, (2, 1, 1))] == [drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, serialization]


PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)
{
    .reg .pred %p<2>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;
    .reg .f32 %f<3>;
    ld.param.u64 %rd1, [k_param_0];
    ld.param.u64 %rd2, [k_param_1];
    cvta.to.global.u64 %rd3, %rd2;
    add.s64 %rd4, %rd3, 16;
    setp.eq.s64 %p1, %rd1, 0;
    @%p1 bra $L__BB0_2;
    BEFORE
$L__BB0_2:
    griddepcontrol.wait;
    ld.global.cg.f32 %f2, [%rd4];
    ret;
}
"""


@pytest.mark.parametrize(("before", "refused"), [
    ("ld.global.nc.f32 %f1, [%rd1];", False),  # parameter 0: an input, readable before the wait
    ("st.shared.f32 [%r1], %f1;", False),  # shared memory is the block's own
    ("ld.global.nc.f32 %f1, [%rd4];", True),  # derived from parameter 1, an output: read before the wait
    ("cp.async.ca.shared.global [%r1], [%rd4], 16;", True),  # the same read, by an asynchronous copy
    ("st.global.f32 [%rd1], %f1;", True),  # any global write before the wait
    ("@%p1 ret;", True),  # a way out that passes no wait
])
def test_the_path_walk_on_hand_written_ptx(before, refused):
    found = check_ptx(PTX.replace("BEFORE", before), {"k": {1}})
    assert bool(found) == refused, found
    assert check_ptx(PTX.replace("BEFORE", before)) == []  # launched in order: nothing to wait for
