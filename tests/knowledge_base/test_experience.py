"""The experience store: exact lookups by problem and GPU, similar problems, and what is never stored."""

from __future__ import annotations

import pytest

from sparseditto.agents.schemas import Choice
from sparseditto.knowledge_base.experience import ExperienceStore, experience_path, problem_key, record_accepted
from sparseditto.spec import parse_spec

H200 = {"name": "NVIDIA H200", "arch": "sm_90"}
CHOICE = Choice(kernel="spmm_csr_rowsplit", params={"VW": 4, "LANES": 32, "WARPS": 4, "UNROLL": 8})


@pytest.fixture
def store(tmp_path):
    return ExperienceStore(tmp_path / "experience.sqlite")


def record(store, spec, choice=CHOICE, gpu=H200, us=21.0):
    return store.record(spec, choice, "// source", {"median_us": us, "speedup_vs_best": 1.1, "best_baseline": "cusparse"},
                        gpu, run_id="r1")


def test_exact_lookup_ignores_name_budget_and_baselines(store, tiny_spmm_dict):
    record(store, parse_spec(tiny_spmm_dict))
    same = parse_spec({**tiny_spmm_dict, "name": "renamed", "budget": {"iterations": 3}, "baselines": ["cusparse"]})
    found = store.exact(same, H200)
    assert found is not None and found.choice == CHOICE and found.gpu_name == "NVIDIA H200"
    assert found.source == "// source" and found.measurement["median_us"] == 21.0


def test_no_exact_match_on_another_gpu_or_problem(store, tiny_spmm_dict):
    record(store, parse_spec(tiny_spmm_dict))
    assert store.exact(parse_spec(tiny_spmm_dict), {"name": "NVIDIA A100", "arch": "sm_80"}) is None
    assert store.exact(parse_spec(tiny_spmm_dict), {"name": "NVIDIA H200", "arch": "sm_80"}) is None
    for change in ({"N": 64}, {"dtype": "fp16"}, {"pattern": {"distribution": "uniform", "density": 0.1}}):
        assert store.exact(parse_spec({**tiny_spmm_dict, **change}), H200) is None, change


def test_the_fastest_of_several_entries_is_reused(store, tiny_spmm_dict):
    spec = parse_spec(tiny_spmm_dict)
    record(store, spec, us=30.0)
    faster = Choice(kernel="spmm_csr_rowsplit", params={"VW": 2, "LANES": 32, "WARPS": 4, "UNROLL": 8})
    record(store, spec, choice=faster, us=20.0)
    assert store.exact(spec, H200).choice == faster
    assert store.count() == 2


def test_similar_problems_closest_first_same_gpu_first(store, tiny_spmm_dict):
    record(store, parse_spec({**tiny_spmm_dict, "N": 512}))
    near = Choice(kernel="spmm_csr_rowsplit", params={"VW": 2, "LANES": 32, "WARPS": 8, "UNROLL": 4})
    record(store, parse_spec({**tiny_spmm_dict, "N": 64}), choice=near)
    other_gpu = Choice(kernel="spmm_csr_rowsplit", params={"VW": 1, "LANES": 32, "WARPS": 2, "UNROLL": 2})
    record(store, parse_spec({**tiny_spmm_dict, "N": 32}), choice=other_gpu, gpu={"name": "NVIDIA A100", "arch": "sm_80"})
    record(store, parse_spec({**tiny_spmm_dict, "dtype": "fp16"}))  # another dtype: not similar

    spec = parse_spec(tiny_spmm_dict)  # N = 32
    similar = store.similar(spec, H200)
    assert [e.choice for e in similar] == [near, CHOICE, other_gpu]
    assert store.similar(parse_spec({**tiny_spmm_dict, "operation": "spmv", "N": 1}), H200) == []


def test_record_accepted_stores_only_gpu_measurements(store, tiny_spmm, measured_report):
    report = measured_report("k").model_dump(mode="json")
    iteration = {"iteration": 1, "choice": CHOICE.model_dump(), "backend": "gpu", "report": report}
    assert record_accepted(store, tiny_spmm, {**iteration, "backend": "compile_only"}, "r0") is None
    assert record_accepted(store, tiny_spmm, {**iteration, "report": {**report, "device": {}}}, "r0") is None
    assert store.count() == 0
    assert record_accepted(store, tiny_spmm, iteration, "r1") is not None
    found = store.exact(tiny_spmm, report["device"])
    assert found.choice == CHOICE and "spmm_csr_rowsplit" in found.source


def test_location_setting(monkeypatch, tmp_path):
    assert experience_path("some/runs").as_posix() == "some/runs/experience.sqlite"
    monkeypatch.setenv("SPARSEDITTO_EXPERIENCE_DB", str(tmp_path / "elsewhere.sqlite"))
    assert experience_path("some/runs") == tmp_path / "elsewhere.sqlite"


def test_problem_key_depends_on_the_target_arch(tiny_spmm):
    assert problem_key(tiny_spmm, "sm_90") != problem_key(tiny_spmm, "sm_80")


def test_a_store_written_before_checks_were_kept_still_opens(tmp_path, tiny_spmm_dict):
    import sqlite3

    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:  # the table as it was first shipped, without checks_json
        conn.execute("CREATE TABLE accepted (id INTEGER PRIMARY KEY AUTOINCREMENT, problem_key TEXT NOT NULL, "
                     "gpu_name TEXT NOT NULL, gpu_arch TEXT NOT NULL, family TEXT NOT NULL, dtype TEXT NOT NULL, "
                     "spec_json TEXT NOT NULL, kernel TEXT NOT NULL, params_json TEXT NOT NULL, source TEXT NOT NULL, "
                     "measurement_json TEXT NOT NULL, run_id TEXT NOT NULL, created_at REAL NOT NULL)")
    old = ExperienceStore(path)
    record(old, parse_spec(tiny_spmm_dict))
    assert old.exact(parse_spec(tiny_spmm_dict), H200).checks == {}


def test_calibration_counts_only_measurements_against_the_current_cost_model(tmp_path):
    """A factor measured against another version of a family's cost model would be applied to this one's
    predictions: a store from before the version column keeps its rows, and they no longer calibrate."""
    import math
    import sqlite3

    from sparseditto.tools.families import get_family

    path = tmp_path / "experience.sqlite"
    with sqlite3.connect(path) as old:  # the table as stores written before the column have it
        old.execute("CREATE TABLE measured (id INTEGER PRIMARY KEY AUTOINCREMENT, family TEXT NOT NULL, kernel TEXT NOT"
                    " NULL, gpu_name TEXT NOT NULL, dtype TEXT NOT NULL, predicted_us REAL NOT NULL, measured_us REAL NOT"
                    " NULL, run_id TEXT NOT NULL, created_at REAL NOT NULL)")
        old.execute("INSERT INTO measured (family, kernel, gpu_name, dtype, predicted_us, measured_us, run_id, created_at)"
                    " VALUES ('csr_spmv', 'spmv_csr_vec4', 'NVIDIA H200', 'fp32', 10.0, 40.0, 'old', 1.0)")
    store = ExperienceStore(path)
    assert get_family("csr_spmv").cost_model != ""
    assert store.calibration("csr_spmv", "NVIDIA H200") == {}
    store.record_measured("csr_spmv", "fp32", "NVIDIA H200", [("spmv_csr_vec4", 10.0, 20.0)], "new")
    assert store.calibration("csr_spmv", "NVIDIA H200") == {"spmv_csr_vec4": pytest.approx(math.sqrt(2.0))}
