"""A new family built from a temporary folder alone, registered through SPARSEDITTO_FAMILY_PATH (no other file
edited), runs compile-only through run_pipeline: spec model, strategies, its kernel, launcher and artifacts."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from sparseditto.errors import SpecError
from sparseditto.pipeline import run_pipeline
from sparseditto.spec import parse_spec
from sparseditto.tools.families import FAMILY_PATH_ENV, families

FAMILY_INIT = '''
"""z = x * y element by element: the smallest family there is, to show the seam."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from sparseditto.spec import SpecBase
from sparseditto.tools.dtypes import dtype as dtype_info, to_float64, to_storage
from sparseditto.tools.families.base import Output, Problem, ProblemFamily, StrategyStart
from sparseditto.tools.launch_script import launch_table


class HadamardSpec(SpecBase):
    family: Literal["hadamard"] = "hadamard"
    operation: Literal["hadamard"] = "hadamard"
    length: Annotated[int, Field(ge=1, le=1 << 28)]


class Hadamard(ProblemFamily):
    name = "hadamard"
    operation = "hadamard"
    format = "dense"
    spec_model = HadamardSpec
    kernels_dir = Path(__file__).parent / "kernels"

    @classmethod
    def claims(cls, data):
        return data.get("operation") == "hadamard"

    def symbols(self, spec):
        return {"L": spec.length}

    def features(self, spec):
        return {"length": float(spec.length)}

    def strategies(self, spec, features):
        vec = 16 // dtype_info(spec.dtype).bytes
        return [StrategyStart("hadamard_vec", {"VEC": min(vec, 4), "BLOCK": 256}, "one vector load per operand per thread")]

    def make_problem(self, spec, seed, shape=None):
        rng = np.random.default_rng(seed)
        L = (shape or self.symbols(spec))["L"]
        x, y = (to_storage(rng.uniform(-1, 1, L).astype(np.float32), spec.dtype) for _ in range(2))
        return Problem(dtype=spec.dtype, symbols={"L": L}, inputs={"x": x, "y": y},
                       input_dtypes={"x": spec.dtype, "y": spec.dtype},
                       outputs={"z": Output((L,), spec.dtype, spec.tolerance or 1e-2)})

    def reference(self, problem):
        d = problem.dtype
        return {"z": to_float64(problem.inputs["x"], d) * to_float64(problem.inputs["y"], d)}

    def flops(self, symbols):
        return float(symbols["L"])

    def min_bytes(self, symbols, dtype):
        return 3.0 * symbols["L"] * dtype_info(dtype).bytes

    def tiny_shape(self, spec):
        return {"L": 1000}

    def sanitizer_shape(self, spec):
        return {"L": min(spec.length, 4099)}

    def held_out_shapes(self, spec, rng):
        return [{"L": spec.length // 2 + int(rng.integers(1, 97))}]

    def launcher(self, candidate, spec, arch):
        return f"# run {candidate.label()} with CuPy\\n{launch_table(candidate)}\\n"


FAMILY = Hadamard()
'''

KERNEL = '''/*---
name: hadamard_vec
operation: hadamard
format: dense
dtypes: [fp32, fp16, bf16]
archs: [sm_80]
strategy: vector
summary: >
  Each thread multiplies VEC consecutive elements; the tail is done one element at a time.
parameters:
  VEC: [1, 2, 4, 8]
  BLOCK: [128, 256, 512]
constraints:
  - "VEC * value_bytes <= 16"
kernels:
  - entry: hadamard_vec
    grid: ["ceil_div(ceil_div(L, VEC), BLOCK)", "1", "1"]
    block: ["BLOCK", "1", "1"]
    args: [x, y, z, L]
---*/
extern "C" __global__ void __launch_bounds__(BLOCK)
hadamard_vec(const value_t* __restrict__ x, const value_t* __restrict__ y, value_t* __restrict__ z, int L) {
    const long first = ((long)blockIdx.x * BLOCK + threadIdx.x) * VEC;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        const long k = first + i;
        if (k < L) z[k] = sd_from_f32(sd_to_f32(x[k]) * sd_to_f32(y[k]));
    }
}
'''


@pytest.fixture
def hadamard_family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "hadamard"
    (folder / "kernels").mkdir(parents=True)
    (folder / "__init__.py").write_text(textwrap.dedent(FAMILY_INIT))
    (folder / "kernels" / "hadamard_vec.cu").write_text(KERNEL)
    monkeypatch.setenv(FAMILY_PATH_ENV, str(folder))
    return folder


def test_a_family_from_a_folder_runs_compile_only_through_run_pipeline(hadamard_family, tmp_path):
    assert "hadamard" in families() and {"csr_spmv", "csr_spmm"} <= set(families())
    spec = {"name": "had", "operation": "hadamard", "length": 100_000, "dtype": "fp16", "budget": {"iterations": 2}}
    result = run_pipeline(spec, runs_dir=str(tmp_path / "runs"), compile_only=True, on_budget="abort")
    assert result.status == "compiled_only"
    folder = Path(result.artifacts_dir)
    saved = json.loads((folder / "result.json").read_text())
    assert saved["plan"]["family"] == "hadamard" and saved["plan"]["symbols"] == {"L": 100_000}
    first = saved["iterations"][0]
    assert first["candidate"] == "hadamard_vec(BLOCK=256, VEC=4)"
    stages = {f["stage"]: f["status"] for f in first["report"]["feedback"]}
    assert stages["compile"] == "passed" and stages["correctness"] == "not_executed"
    assert "#define VEC 4" in (folder / "kernel.cu").read_text()
    assert "hadamard_vec" in (folder / "launch.py").read_text()


def test_the_family_spec_model_validates_its_own_fields(hadamard_family):
    spec = parse_spec({"operation": "hadamard", "length": 7})
    assert type(spec).__name__ == "HadamardSpec" and spec.family == "hadamard"
    with pytest.raises(SpecError, match="length"):
        parse_spec({"operation": "hadamard", "length": 0})
    with pytest.raises(SpecError, match="baselines"):
        parse_spec({"operation": "hadamard", "length": 7, "baselines": ["cusparse"]})


def test_without_the_folder_the_family_is_unknown(monkeypatch):
    monkeypatch.delenv(FAMILY_PATH_ENV, raising=False)
    assert "hadamard" not in families()
    with pytest.raises(SpecError, match="operation"):
        parse_spec({"operation": "hadamard", "length": 7})
