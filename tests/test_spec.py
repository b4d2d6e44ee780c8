"""Spec validation: native and document forms, one-line errors naming the field, files and examples."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from sparseditto.errors import NotImplementedFamilyError, SpecError
from sparseditto.spec import load_spec, parse_spec
from sparseditto.tools.families import families, get_family
from sparseditto.tools.families.csr_common import MatrixFilePattern, UnstructuredPattern

DOC_SPEC = {
    "task": "sparse_matmul_kernel",
    "sparsity_pattern": {"type": "unstructured", "sparsity_ratio": 0.95},
    "matrix_shape": [4096, 4096],
    "dtype": "fp16",
    "gpu_arch": "sm_90",
    "baseline": "dense_cublas",
}


def native(**overrides):
    spec = {"operation": "spmm", "pattern": {"distribution": "uniform", "density": 0.01}, "M": 512, "K": 256, "N": 64}
    spec.update(overrides)
    return spec


# ---- accepted specs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "pattern", "N", "family"),
    [
        ("spmm", {"distribution": "uniform", "density": 0.02}, 64, "csr_spmm"),
        ("spmm", {"distribution": "power_law", "nnz_per_row": 12, "power_law_exponent": 2.2}, 16, "csr_spmm"),
        ("spmm", {"distribution": "banded", "nnz_per_row": 5}, 8, "csr_spmm"),
        ("spmv", {"distribution": "uniform", "nnz_per_row": 16}, 1, "csr_spmv"),
        ("spmv", {"distribution": "power_law", "density": 0.01}, 1, "csr_spmv"),
        ("spmv", {"distribution": "banded", "density": 0.05}, 1, "csr_spmv"),
    ],
)
def test_native_specs_are_accepted(operation, pattern, N, family):
    spec = parse_spec({"operation": operation, "pattern": pattern, "M": 1000, "K": 800, "N": N, "dtype": "bf16"})
    assert spec.family == family
    assert isinstance(spec.pattern, UnstructuredPattern)
    assert spec.pattern.distribution == pattern["distribution"]
    assert (spec.M, spec.K, spec.N, spec.dtype) == (1000, 800, N, "bf16")


def test_spmv_defaults_N_to_one_and_fp32():
    spec = parse_spec({"operation": "spmv", "pattern": {"nnz_per_row": 4}, "M": 10, "K": 10})
    assert spec.N == 1
    assert spec.dtype == "fp32"
    assert spec.pattern.distribution == "uniform"


def test_document_form_is_accepted():
    spec = parse_spec(DOC_SPEC)
    assert spec.family == "csr_spmm"
    assert spec.pattern.density == pytest.approx(0.05)
    assert (spec.M, spec.K) == (4096, 4096)
    assert spec.N == 4096  # [M, K] for spmm: B is K x K
    assert spec.dtype == "fp16"
    assert spec.arch == "sm_90"
    assert spec.baselines == ("cublas",)


def test_document_form_with_three_dimensional_shape():
    spec = parse_spec({**DOC_SPEC, "matrix_shape": [2048, 1024, 256]})
    assert (spec.M, spec.K, spec.N) == (2048, 1024, 256)


def test_document_block_sparse_is_refused_as_not_implemented():
    doc = {**DOC_SPEC, "sparsity_pattern": {"type": "block_sparse", "block_size": [32, 32], "sparsity_ratio": 0.8}}
    with pytest.raises(NotImplementedFamilyError) as info:
        parse_spec(doc)
    msg = str(info.value)
    assert "spmm on a block_sparse pattern" in msg
    for implemented in families():
        assert implemented in msg
    assert "\n" not in msg


def test_not_implemented_family_is_a_spec_error():
    with pytest.raises(NotImplementedFamilyError, match="spgemm"):
        parse_spec(native(operation="spgemm"))


# ---- refused specs: SpecError with one line naming the field --------------------------------------------


def _without(d, key):
    return {k: v for k, v in d.items() if k != key}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        pytest.param(native(dtype="fp64"), r"^dtype:", id="bad dtype"),
        pytest.param(native(M=-4), r"^M:", id="negative M"),
        pytest.param(native(K=0), r"^K:", id="zero K"),
        pytest.param(native(pattern={"density": 1.5}), r"^pattern\.density:", id="density above 1"),
        pytest.param(native(pattern={"density": 0.1, "nnz_per_row": 3}), r"density.*nnz_per_row", id="density and nnz_per_row"),
        pytest.param(native(pattern={"distribution": "uniform"}), r"density.*nnz_per_row", id="neither density nor nnz_per_row"),
        pytest.param(native(pattern={"distribution": "zipf", "density": 0.1}), r"^pattern\.distribution:", id="unknown distribution"),
        pytest.param(_without(native(), "M"), r"\bM\b", id="missing M"),
        pytest.param(native(operation="spmv", N=8), r"\bN\b", id="spmv with N != 1"),
        pytest.param(native(operation="convolution"), r"^operation:", id="unknown operation"),
        pytest.param(native(arch="sm_70"), r"^arch:", id="unsupported arch"),
        pytest.param(native(arch="hopper"), r"^arch:", id="malformed arch"),
        pytest.param(native(colour="red"), r"^colour:", id="unknown field"),
        pytest.param(native(pattern={"nnz_per_row": 300}), r"nnz_per_row.*K", id="more nonzeros per row than K"),
        pytest.param({**DOC_SPEC, "task": "sparse_conv_kernel"}, r"^task:", id="unknown task"),
        pytest.param({**DOC_SPEC, "baseline": "mkl"}, r"^baseline:", id="unknown baseline"),
        pytest.param({**DOC_SPEC, "sparsity_pattern": {"type": "checkerboard"}}, r"^sparsity_pattern\.type:", id="unknown pattern type"),
        pytest.param({**DOC_SPEC, "matrix_shape": [4096]}, r"^matrix_shape:", id="bad matrix_shape"),
        pytest.param(["operation", "spmm"], r"^spec:", id="not a mapping"),
    ],
)
def test_bad_spec_raises_one_line_spec_error_naming_the_field(data, field):
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    msg = str(info.value)
    assert "\n" not in msg
    assert re.search(field, msg), msg


def test_bad_value_is_quoted_in_the_message():
    with pytest.raises(SpecError, match="fp64"):
        parse_spec(native(dtype="fp64"))


# ---- files ---------------------------------------------------------------------------------------------


def test_yaml_file_that_is_not_yaml(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("operation: [spmm\nM: 4\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "not valid YAML" in str(info.value)
    assert "broken.yaml" in str(info.value)
    assert "\n" not in str(info.value)


def test_json_file_that_is_not_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"operation": "spmm",')
    with pytest.raises(SpecError, match="not valid JSON"):
        load_spec(path)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "nope.yaml")


def test_yaml_file_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- spmm\n- spmv\n")
    with pytest.raises(SpecError, match="mapping"):
        load_spec(path)


def test_json_spec_file_takes_its_name_from_the_file(tmp_path):
    path = tmp_path / "my_problem.json"
    path.write_text(json.dumps(native()))
    spec = load_spec(path)
    assert spec.name == "my_problem"
    assert spec.family == "csr_spmm"


def test_every_example_loads(examples_dir):
    files = sorted(p for p in examples_dir.iterdir() if p.suffix in {".yaml", ".yml", ".json"})
    assert len(files) >= 7
    for path in files:
        spec = load_spec(path)
        assert spec.family in families(), path.name
        assert get_family(spec.family).symbols(spec)["nnz"] > 0, path.name


def test_matrix_file_spec_resolves_the_path_against_the_spec_folder(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    mat = sp.random(40, 30, density=0.1, format="coo", random_state=rng, dtype=np.float64)
    (tmp_path / "mats").mkdir()
    scipy.io.mmwrite(tmp_path / "mats" / "small.mtx", mat)
    spec_file = tmp_path / "specs" / "real.yaml"
    spec_file.parent.mkdir()
    spec_file.write_text("operation: spmv\npattern: {kind: matrix_file, path: ../mats/small.mtx}\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_spec(spec_file)

    assert isinstance(spec.pattern, MatrixFilePattern)
    assert spec.pattern.path.resolve() == (tmp_path / "mats" / "small.mtx").resolve()
    assert get_family("csr_spmv").symbols(spec) == {"M": 40, "K": 30, "N": 1, "nnz": mat.nnz}

    problem = get_family("csr_spmv").make_problem(spec, seed=0)
    csr = sp.csr_matrix(mat)
    csr.sort_indices()
    assert np.array_equal(problem.inputs["rowptr"], csr.indptr)
    assert np.array_equal(problem.inputs["colind"], csr.indices)


def test_matrix_file_spec_with_a_missing_matrix(tmp_path):
    spec_file = tmp_path / "real.yaml"
    spec_file.write_text("operation: spmv\npattern: {kind: matrix_file, path: missing.mtx}\n")
    spec = load_spec(spec_file)
    with pytest.raises(SpecError, match="missing.mtx"):
        get_family("csr_spmv").make_problem(spec, seed=0)


def test_spec_file_relative_path_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    mat = sp.identity(12, format="coo")
    scipy.io.mmwrite(tmp_path / "cfg" / "eye.mtx", mat)
    (tmp_path / "cfg" / "spec.yaml").write_text("operation: spmm\nN: 4\npattern: {kind: matrix_file, path: eye.mtx}\n")
    monkeypatch.chdir(tmp_path)
    spec = load_spec(Path("cfg/spec.yaml"))
    assert get_family("csr_spmm").symbols(spec) == {"M": 12, "K": 12, "N": 4, "nnz": 12}
