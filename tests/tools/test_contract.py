"""The kernel contract: compile options from an allow-list, upper-case parameters, launch geometry."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sparseditto.tools.contract import KernelCandidate, KernelLaunch, Workspace
from sparseditto.tools.expr import ExpressionError

SOURCE = 'extern "C" __global__ void k(float* C, int M) {}'


def candidate(**overrides):
    fields = {
        "name": "test_kernel",
        "family": "csr_spmm",
        "source": SOURCE,
        "parameters": {"WARPS": 4},
        "kernels": [KernelLaunch(entry="k", grid=("ceil_div(M, WARPS)", "ceil_div(N, 32)", "1"),
                                 block=("32 * WARPS", "1", "1"), args=("C", "M"))],
    }
    fields.update(overrides)
    return KernelCandidate(**fields)


@pytest.mark.parametrize("options", [(), ("-lineinfo",), ("--extra-device-vectorization",), ("--maxrregcount=64",),
                                     ("-DTILE=32", "-DNEG=-1", "-lineinfo")])
def test_allowed_compile_options(options):
    assert candidate(compile_options=options).compile_options == options


@pytest.mark.parametrize(
    "option",
    ["--use_fast_math", "-I/etc", "--include-path=/tmp", "-DTILE=abc", "-Dlower=1", "--maxrregcount=4096",
     "-G", "-lineinfo; rm -rf /", "--pre-include=/etc/passwd", "-DX=1 -DY=2"],
)
def test_compile_options_outside_the_allow_list_are_refused(option):
    with pytest.raises(ValidationError, match="not allowed"):
        candidate(compile_options=("-lineinfo", option))


def test_parameter_names_must_be_upper_case():
    with pytest.raises(ValidationError, match="upper-case"):
        candidate(parameters={"warps": 4})


def test_entry_point_must_be_an_identifier():
    with pytest.raises(ValidationError):
        KernelLaunch(entry="k(); evil", grid=("1", "1", "1"), block=("1", "1", "1"), args=())


def test_candidate_is_frozen():
    c = candidate()
    with pytest.raises(ValidationError):
        c.source = "changed"


def test_label_and_defines_list_parameters_sorted():
    c = candidate(parameters={"WARPS": 4, "UNROLL": 2})
    assert c.label() == "test_kernel(UNROLL=2, WARPS=4)"
    assert c.defines(1) == ["-DSD_DTYPE=1", "-DUNROLL=2", "-DWARPS=4"]


def test_geometry_evaluates_launch_expressions():
    (geo,) = candidate().geometry({"M": 1000, "N": 61})
    assert geo.entry == "k"
    assert geo.grid == (250, 2, 1)
    assert geo.block == (128, 1, 1)
    assert geo.shared_bytes == 0


@pytest.mark.parametrize(
    ("launch", "error"),
    [
        (dict(grid=("1", "1", "1"), block=("2048", "1", "1")), ValueError),  # > 1024 threads
        (dict(grid=("M - M", "1", "1"), block=("32", "1", "1")), ValueError),  # empty grid
        (dict(grid=("1", "70000", "1"), block=("32", "1", "1")), ValueError),  # grid.y above the device limit
        (dict(grid=("1", "1", "1"), block=("32", "1", "1"), shared_bytes="0 - 1"), ValueError),
        (dict(grid=("ceil_div(M, TILE)", "1", "1"), block=("32", "1", "1")), ExpressionError),
    ],
)
def test_bad_geometry_is_refused(launch, error):
    c = candidate(kernels=[KernelLaunch(entry="k", args=("C",), **launch)])
    with pytest.raises(error):
        c.geometry({"M": 100, "N": 8})


def test_workspace_sizes():
    c = candidate(workspace={"partial": Workspace(dtype="fp32", size="max(M // WARPS, 1)")})
    assert c.workspace_sizes({"M": 100}) == {"partial": 25}
