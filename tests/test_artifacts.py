"""A run's artifacts for every reference kernel: kernel.cu builds on its own, and launch.py prepares the
inputs and launches the kernels exactly as the harness that validated them did."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sparseditto.artifacts import kernel_source
from sparseditto.knowledge_base.library import reference_kernels
from sparseditto.spec import parse_spec
from sparseditto.tools.compiler import compile_source
from sparseditto.tools.families import get_family

from kernel_params import starting_params

NUM_SMS = 132


def problem_spec(family: str, dtype: str):
    if family == "csr_spmv":  # heavy-tailed rows, so that the long-row preparations have work to do
        return parse_spec({"operation": "spmv", "pattern": {"distribution": "power_law", "nnz_per_row": 16,
                                                              "power_law_exponent": 2.1},
                           "M": 3000, "K": 3000, "dtype": dtype})
    return parse_spec({"operation": "spmm", "pattern": {"density": 0.03}, "M": 300, "K": 280, "N": 40, "dtype": dtype})


class NumpyAsCupy:
    """Stands in for cupy inside launch.py's host code, so that it runs without a GPU."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def asnumpy(a):
        return np.asarray(a)


def load_launcher(folder: Path, candidate, spec) -> dict:
    (folder / "kernel.cu").write_text(kernel_source(candidate, spec.dtype))
    path = folder / "launch.py"
    path.write_text(get_family(spec.family).launcher(candidate, spec, "sm_90"))
    namespace = {"__file__": str(path), "__name__": "launch"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    namespace["cp"] = NumpyAsCupy()
    return namespace


CASES = [pytest.param(k, d, id=f"{k.name}-{d}") for k in reference_kernels() for d in k.dtypes]
# launch.py's CSR preparation path (rowptr, colind, values in; the format's arrays out); other families test their own
CSR_CASES = [pytest.param(k, d, id=f"{k.name}-{d}") for k in reference_kernels() for d in k.dtypes
             if k.family in ("csr_spmv", "csr_spmm")]


@pytest.mark.parametrize(("kernel", "dtype"), CASES)
def test_kernel_cu_builds_on_its_own(kernel, dtype):
    candidate = kernel.instantiate(starting_params(kernel, dtype))
    text = kernel_source(candidate, dtype)
    for name, value in candidate.parameters.items():
        assert f"#define {name} {value}" in text
    result = compile_source(text, candidate.compile_arch("sm_90"), [])  # no -D options: the file carries its parameters
    assert result.ok, result.log[-2000:]
    assert {launch.entry for launch in kernel.kernels} <= set(result.resources)


@pytest.mark.parametrize(("kernel", "dtype"), CSR_CASES)
def test_launch_py_matches_the_harness(kernel, dtype, tmp_path):
    spec = problem_spec(kernel.family, dtype)
    candidate = kernel.instantiate(starting_params(kernel, dtype))
    launch = load_launcher(tmp_path, candidate, spec)
    assert launch["PARAMS"] == candidate.parameters
    assert launch["DTYPE"] == dtype

    family = get_family(kernel.family)
    problem = family.make_problem(spec, seed=5)
    inputs = problem.inputs
    arrays, extra = launch["prepare"](inputs["rowptr"], inputs["colind"], inputs["values"])
    expected_arrays, expected_extra = (family.preparations[candidate.preparation](problem, candidate.parameters)
                                       if candidate.preparation else ({}, {}))
    assert set(arrays) == set(expected_arrays)
    for name, array in expected_arrays.items():
        assert np.array_equal(np.asarray(arrays[name]), array), name
    assert extra == expected_extra

    symbols = {**problem.symbols, **expected_extra, "value_bytes": inputs["values"].dtype.itemsize, "num_sms": NUM_SMS}
    s = {**symbols, **launch["PARAMS"], **extra}
    operand, out = ("x", "y") if kernel.family == "csr_spmv" else ("B", "C")
    buffers = {"rowptr", "colind", "values", operand, out, *arrays, *launch["WORKSPACE"]}
    launches = launch["LAUNCHES"]
    geometry = candidate.geometry(symbols)
    assert [entry for entry, *_ in launches] == [g.entry for g in geometry]
    for (entry, grid, block, smem, args), geo in zip(launches, geometry):
        assert tuple(grid(s)) == geo.grid, entry
        assert tuple(block(s)) == geo.block, entry
        assert smem(s) == geo.shared_bytes, entry
        missing = [a for a in args if a not in buffers and a not in s]
        assert not missing, f"{entry}: launch.py cannot bind {missing}"
    for name, (kind, size) in launch["WORKSPACE"].items():
        assert size(s) == candidate.workspace_sizes(symbols)[name]


SP24_DRIVER_CASES = [pytest.param(k, d, id=f"{k.name}-{d}") for k in reference_kernels() for d in k.dtypes
                     if k.family == "sparse24_gemm" and k.tensor_maps]


@pytest.mark.parametrize(("kernel", "dtype"), SP24_DRIVER_CASES)
def test_launch_py_of_a_tma_kernel_goes_through_the_harness_launch(kernel, dtype, tmp_path, monkeypatch):
    """A kernel taking TMA tensor maps (or clusters) cannot be launched by CuPy: launch.py hands the harness's own
    launch (sparseditto.tools.kernel_launch.launch_candidate) the same candidate, arrays, symbols and value types.
    The launch plan it will check is made here from what launch.py passes: every argument binds, the maps plan."""
    from sparseditto.tools import kernel_launch
    from sparseditto.tools.launch_check import DeviceLimits, plan_launch
    from sparseditto.tools.tensormap import ArrayInfo

    spec = parse_spec({**get_family(kernel.family).example_spec, "dtype": dtype, "arch": "sm_90a", "N": 256,
                       "epilogue": {"bias": True, "alpha": True}})
    candidate = kernel.instantiate(starting_params(kernel, dtype))
    launch = load_launcher(tmp_path, candidate, spec)
    assert "CANDIDATE" in launch and "driver path" in launch["__doc__"] + str(launch.get("USAGE", ""))
    calls = []
    monkeypatch.setattr(kernel_launch, "launch_candidate", lambda *args: calls.append(args))
    problem = get_family(kernel.family).make_problem(spec, seed=3)
    cp = launch["cp"]
    cp.cuda = type("cuda", (), {"Device": lambda: type("D", (), {"attributes": {"MultiProcessorCount": NUM_SMS}})()})
    launch["_module"] = object()
    inputs = problem.inputs
    launch["run"](inputs["A_values"], inputs["A_meta"], inputs["B"], inputs.get("bias", np.zeros(spec.M, np.float16)),
                  alpha=0.5)
    (cand, _, arrays, symbols, scalars, value_dtype, value_types), = calls
    assert cand == candidate and value_dtype == dtype
    infos = {n: ArrayInfo(tuple(a.shape), value_types.get(n, a.dtype.name), a.dtype.itemsize) for n, a in arrays.items()}
    plan = plan_launch(cand, {**symbols, "num_sms": NUM_SMS, "value_bytes": inputs["B"].dtype.itemsize}, scalars,
                       infos, value_dtype, DeviceLimits.for_arch("sm_90"))
    assert set(plan.tensor_maps) == set(candidate.tensor_maps)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_on_the_gpu_launch_py_runs_the_hopper_kernel_on_the_users_arrays(dtype, tmp_path):
    """The exported launch.py of the TMA and cluster kernel computes the product on arrays the user made."""
    import cupy

    from sparseditto.knowledge_base.library import get_kernel
    from sparseditto.tools.dtypes import to_float64

    spec = parse_spec({"operation": "spmm", "pattern": {"kind": "n_m"}, "M": 528, "K": 1088, "N": 400, "dtype": dtype,
                       "arch": "sm_90a", "epilogue": {"bias": True, "activation": "relu", "alpha": True}})
    family = get_family(spec.family)
    params = {"BM": 256, "BN": 128, "BK": 64, "STAGES": 6, "LAG": 2, "CLUSTER": 2, "INFLIGHT": 0, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2}
    candidate = get_kernel("sp24_wgmma_sp").instantiate(params)
    (tmp_path / "kernel.cu").write_text(kernel_source(candidate, dtype))
    (tmp_path / "launch.py").write_text(family.launcher(candidate, spec, "sm_90a"))
    namespace = {"__file__": str(tmp_path / "launch.py"), "__name__": "launch"}
    exec(compile((tmp_path / "launch.py").read_text(), "launch.py", "exec"), namespace)
    problem = family.make_problem(spec, seed=4)
    inputs = {name: cupy.asarray(a) for name, a in problem.inputs.items()}
    C = namespace["run"](inputs["A_values"], inputs["A_meta"], inputs["B"], inputs["bias"], alpha=problem.scalars["alpha"])
    out = to_float64(C.get(), next(iter(problem.outputs.values())).dtype)
    ref = family.reference(problem)[next(iter(problem.outputs))]
    assert np.linalg.norm(out - ref) <= 1e-2 * np.linalg.norm(ref)
