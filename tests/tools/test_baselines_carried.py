"""The baselines are timed in full once per spec: a later verification of the same spec times only the fastest
correct configuration beside its candidate and carries the others. Judged here with doubles for the GPU child, the
library calls and the clock: which configurations are built and timed, what is carried, and which jobs carry the
earlier timings (the timings themselves are the GPU tests' business)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools import runner
from sparseditto.tools import verifier as verifier_module
from sparseditto.tools.ahead import AheadResults
from sparseditto.tools.baselines.common import BaselineCall
from sparseditto.tools.results import BaselineTiming, Feedback
from sparseditto.tools.runner import RunJob, RunResult
from sparseditto.tools.timing import Timing


def spmv(name: str = "carried"):
    return parse_spec({"name": name, "operation": "spmv", "M": 4000, "K": 4000,
                       "pattern": {"distribution": "uniform", "nnz_per_row": 8}})


def vec4(group: int):
    return get_kernel("spmv_csr_vec4").instantiate({"GROUP": group, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})


def timing(name: str, library: str, us: float, correct: bool = True) -> BaselineTiming:
    return BaselineTiming(name=name, library=library, config=name, median_us=us, rel_error=0.0 if correct else 1.0,
                          correct=correct)


FIRST = [timing("cusparse_alg1", "cusparse", 20.0), timing("cusparse_default", "cusparse", 22.0),
         timing("torch_mv", "torch_sparse", 30.0), timing("wrong_but_fast", "cusparse", 5.0, correct=False)]


# -- the runner: which configurations are timed -------------------------------------------------------------------

@pytest.fixture
def library(monkeypatch):
    """Doubles for the library calls, the device and the clock; records the configurations built."""
    built: dict[str, list[str]] = {"all": [], "fastest": []}
    answer = np.arange(4.0)

    def call(name: str, library: str) -> BaselineCall:
        return BaselineCall(name=name, library=library, config=name, run=lambda: None,
                            output=SimpleNamespace(get=lambda: answer.astype(np.float32)))

    def every_call(job, arrays, problem):
        built["all"] += [b.name for b in FIRST]
        return [call(b.name, b.library) for b in FIRST]

    def fastest_call(job, arrays, problem, libraries, name):
        built["fastest"].append(name)
        return [] if built.get("refuse") else [call(name, libraries[0])]

    monkeypatch.setattr(runner, "_baseline_calls", every_call)
    monkeypatch.setattr(runner, "_first_working_call", fastest_call)
    monkeypatch.setattr(runner, "time_call", lambda run, flush, warmup, runs: Timing(median_us=15.0, p10_us=15.0,
                                                                                     p90_us=15.0, runs=runs))
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=SimpleNamespace(Device=lambda: SimpleNamespace(synchronize=lambda: None))))
    problem = SimpleNamespace(outputs={"y": SimpleNamespace(dtype="fp32")}, inputs={"x": None})
    first_set = SimpleNamespace(tolerances={"y": 1e-6}, pristine={"x": np.zeros(4)}, refs={"y": answer})
    return built, problem, first_set


def job(earlier: list[BaselineTiming]) -> RunJob:
    return RunJob(candidate=vec4(4), spec=spmv(), cubin_path="unused.cubin", seeds=[1], held_out_shapes=[],
                  timing_seed=3, earlier_baselines=earlier)


def test_the_first_verification_times_every_configuration(library):
    built, problem, first_set = library
    baselines, _ = runner._time_baselines(job([]), problem, first_set, flush=None)
    assert built == {"all": [b.name for b in FIRST], "fastest": []}
    assert [b.name for b in baselines] == [b.name for b in FIRST] and not any(b.carried for b in baselines)


def test_a_later_verification_times_the_fastest_correct_one_and_carries_the_rest(library):
    built, problem, first_set = library
    baselines, _ = runner._time_baselines(job(FIRST), problem, first_set, flush=None)
    assert built == {"all": [], "fastest": ["cusparse_alg1"]}  # the wrong one is never the reference
    timed = [b for b in baselines if not b.carried]
    assert [(b.name, b.median_us) for b in timed] == [("cusparse_alg1", 15.0)]  # timed again, beside the candidate
    carried = {b.name: b.median_us for b in baselines if b.carried}
    assert carried == {"cusparse_default": 22.0, "torch_mv": 30.0, "wrong_but_fast": 5.0}
    assert runner._how_timed(baselines, timed_here=True).startswith("the fastest in this run, 3 others carried")


def test_when_the_fastest_no_longer_builds_every_configuration_is_timed_again(library):
    built, problem, first_set = library
    built["refuse"] = True
    baselines, _ = runner._time_baselines(job(FIRST), problem, first_set, flush=None)
    assert built["all"] == [b.name for b in FIRST] and not any(b.carried for b in baselines)


# -- the verifier: which jobs carry the earlier timings ----------------------------------------------------------

@pytest.fixture
def children(monkeypatch):
    jobs: list[RunJob] = []

    def run_child(job, tmp, timeout):
        jobs.append(job)
        baselines = [b.model_copy(update={"carried": b.name != "cusparse_alg1"}) for b in job.earlier_baselines] or FIRST
        bench = Feedback(stage="benchmark", status="passed", message="10 us", evidence={"sanitizer_instances": []})
        return RunResult(device={"name": "double"}, trials=[], baselines=baselines,
                         feedback=[Feedback(stage="correctness", status="passed"), bench])

    monkeypatch.setattr(verifier_module, "run_child", run_child)
    monkeypatch.setattr(verifier_module, "AHEAD", AheadResults())
    monkeypatch.setattr(verifier_module, "SPEC_BASELINES", verifier_module.SpecBaselines())
    monkeypatch.setattr(verifier_module, "_PROCESS_TOOLS", verifier_module.ProcessToolsRecord())
    return jobs


def verifier():
    """A new verifier per call, as the pipeline's tool node makes one per verification."""
    return verifier_module.GpuVerifier(arch="sm_90", sanitize=False, profile=False)


def test_later_verifications_of_a_spec_carry_its_first_timings_and_another_spec_starts_afresh(children):
    verifier().verify(vec4(4), spmv())
    verifier().verify(vec4(8), spmv())
    verifier().verify(vec4(16), spmv())
    verifier().verify(vec4(4), spmv("another"))
    verifier().verify(vec4(8), spmv())  # back to the first spec: its timings were let go
    assert [len(j.earlier_baselines) for j in children] == [0, 4, 4, 0, 0]
    # a run's carried set never replaces the first full one
    assert children[2].earlier_baselines == FIRST


def test_the_pipelines_tool_node_carries_between_its_verifications(children, monkeypatch):
    """Through make_verifier, as `sparseditto run` and the eval build it: a new verifier for every call."""
    from sparseditto.tools import device

    facts = device.DeviceFacts(gpu={"name": "double", "arch": "sm_90"}, nvcc="nvcc")
    monkeypatch.setattr(device, "detect", lambda: facts)
    for group in (4, 8):
        verifier_module.make_verifier().verify(vec4(group), spmv())
    assert [len(j.earlier_baselines) for j in children] == [0, 4]


# -- which timings a speedup is measured against -----------------------------------------------------------------

def test_the_speedup_is_against_a_baseline_timed_in_this_run_even_when_a_carried_one_is_faster():
    again = timing("cusparse_alg1", "cusparse", 23.0)  # the earlier fastest, slower on this instance
    carried = [b.model_copy(update={"carried": True}) for b in FIRST[1:]]  # cusparse_default at 22 us among them
    best, per_library = runner.reference_baselines([again, *carried])
    assert best == again
    assert per_library["cusparse"] == again  # a library timed here is measured by what was timed here
    assert per_library["torch_sparse"].carried and per_library["torch_sparse"].median_us == 30.0
    assert runner.reference_baselines(carried)[0] is None  # nothing timed here: no speedup reference


def test_the_fastest_configuration_is_built_from_its_own_library_alone(monkeypatch):
    from sparseditto.tools import baselines as registry
    from sparseditto.tools.baselines import common

    asked = []

    def candidates(family, libraries, problem, device):
        asked.append(list(libraries))
        return [SimpleNamespace(name=n) for n in ("cusparse_default", "cusparse_alg1")]

    monkeypatch.setattr(registry, "candidates", candidates)
    monkeypatch.setattr(common, "collect", lambda options: [o.name for o in options])
    problem = SimpleNamespace(inputs={"x": None})
    built = runner._first_working_call(job([]), {"x": 1}, problem, [FIRST[0].library], FIRST[0].name)
    assert asked == [["cusparse"]] and built == ["cusparse_alg1"]
