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
from sparseditto.tools.verifier import check_and_compile


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


def test_the_early_entry_waits_in_the_compiled_code_and_a_missing_wait_is_refused():
    result, feedback, _ = check_and_compile(merge_path(1), spec(), "sm_90")
    assert result is not None and result.ok
    assert not [f for f in feedback if f.status in {"failed", "error"}], feedback
    assert check_ptx(result.ptx, {"spmv_merge_fixup"}) == []
    # the wait gone from the fix-up's code: refused, by the PTX whatever the source spells
    no_wait = merge_path(1)
    no_wait = no_wait.model_copy(update={"source": no_wait.source.replace(
        "    if (EARLY) sd_wait_earlier_launches();\n", "")})
    result, feedback, _ = check_and_compile(no_wait, spec(), "sm_90")
    refused = [f for f in feedback if f.status == "failed"]
    assert len(refused) == 1 and refused[0].evidence == {"layer": "ptx", "entry": "spmv_merge_fixup"}
    # the tiles entry is never launched early, so its lack of a wait is fine
    assert check_ptx(result.ptx, {"spmv_merge_tiles"})[0].evidence["entry"] == "spmv_merge_tiles"
    assert check_ptx(result.ptx) == []


def test_a_launch_declares_early_as_an_expression():
    launch = KernelLaunch(entry="k", grid=("1", "1", "1"), block=("32", "1", "1"), args=(), early="EARLY")
    assert launch.early == "EARLY" and KernelLaunch(entry="k", grid=("1", "1", "1"), block=("32", "1", "1"),
                                                     args=()).early == "0"


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
