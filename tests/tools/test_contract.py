"""The kernel contract: compile options from an allow-list, upper-case parameters, launch geometry."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sparseditto.tools.contract import KernelCandidate, KernelLaunch, ScalarArg, TensorMap, Workspace
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


def test_geometry_evaluates_clusters_and_refuses_bad_expressions():
    c = candidate(kernels=[KernelLaunch(entry="k", grid=("2 * M", "1", "1"), block=("32", "1", "1"),
                                        cluster=("2", "1", "1"), args=("C",))])
    assert c.geometry({"M": 3, "N": 8})[0].cluster == (2, 1, 1)
    bad = candidate(kernels=[KernelLaunch(entry="k", grid=("ceil_div(M, TILE)", "1", "1"), block=("32", "1", "1"), args=("C",))])
    with pytest.raises(ExpressionError):
        bad.geometry({"M": 100, "N": 8})


def test_workspace_sizes():
    c = candidate(workspace={"partial": Workspace(dtype="fp32", size="max(M // WARPS, 1)")})
    assert c.workspace_sizes({"M": 100}) == {"partial": 25}


def test_arguments_are_names_or_typed_scalars():
    launch = KernelLaunch.model_validate({"entry": "k", "grid": [1, "1", "1"], "block": ["32", 1, 1],
                                          "args": ["C", {"name": "nnz", "type": "int64"}, {"name": "alpha", "type": "float32"}]})
    assert launch.args == ("C", ScalarArg(name="nnz", type="int64"), ScalarArg(name="alpha", type="float32"))
    assert launch.grid == ("1", "1", "1")  # YAML integers are taken as expressions
    for bad in ({"name": "nnz", "type": "uint8"}, {"name": "n-1", "type": "int32"}, {"name": "nnz"}, "a b"):
        with pytest.raises(ValidationError):
            KernelLaunch(entry="k", grid=("1", "1", "1"), block=("1", "1", "1"), args=(bad,))


def test_tensor_map_declarations_agree_on_rank():
    assert TensorMap(array="A", box=("BK", "BM")).swizzle == "none"
    with pytest.raises(ValidationError, match="element_strides"):
        TensorMap(array="A", box=("BK", "BM"), element_strides=("1",))
    with pytest.raises(ValidationError, match="dims and strides"):
        TensorMap(array="A", box=("BK", "BM"), dims=("K", "M"))
    with pytest.raises(ValidationError, match="strides lists"):
        TensorMap(array="A", box=("BK", "BM"), dims=("K", "M"), strides=("K", "1"))
    with pytest.raises(ValidationError):
        TensorMap(array="A", box=("1",) * 6)
    with pytest.raises(ValidationError):
        TensorMap(array="A", box=("BK",), swizzle="256B")


def test_a_name_is_a_workspace_or_a_tensor_map():
    with pytest.raises(ValidationError, match="not both"):
        candidate(workspace={"t": Workspace(dtype="fp32", size="M")}, tensor_maps={"t": TensorMap(array="C", box=("4",))})


def test_workspaces_take_every_operand_type_and_accumulation_is_recorded():
    c = candidate(workspace={"w": Workspace(dtype="fp8_e4m3", size="M"), "v": Workspace(dtype="value", size="M")},
                  accumulate="fp16")
    assert c.accumulate == "fp16" and c.workspace["w"].dtype == "fp8_e4m3"
    with pytest.raises(ValidationError):
        Workspace(dtype="complex64", size="M")
