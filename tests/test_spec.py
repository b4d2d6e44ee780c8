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
    with pytest.raises(SpecError, match=r"^pattern\.path: no such matrix file .*missing\.mtx$") as info:
        load_spec(spec_file)
    assert info.value.field == "pattern.path"


def test_spec_file_relative_path_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    mat = sp.identity(12, format="coo")
    scipy.io.mmwrite(tmp_path / "cfg" / "eye.mtx", mat)
    (tmp_path / "cfg" / "spec.yaml").write_text("operation: spmm\nN: 4\npattern: {kind: matrix_file, path: eye.mtx}\n")
    monkeypatch.chdir(tmp_path)
    spec = load_spec(Path("cfg/spec.yaml"))
    assert get_family("csr_spmm").symbols(spec) == {"M": 12, "K": 12, "N": 4, "nnz": 12}


# ---- strict types, ranges and the document form's own field names -------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(native(M=True), r"^M: must be an integer, not true or false \(got True\)$", id="M true"),
        pytest.param(native(N=False), r"^N: must be an integer, not true or false", id="N false"),
        pytest.param(native(pattern={"density": True}), r"^pattern\.density: must be a number, not true or false", id="density true"),
        pytest.param(native(budget={"iterations": True}), r"^budget\.iterations: .*not true or false", id="iterations true"),
        pytest.param(native(seed=-1), r"^seed: must be an integer with 0 <= seed < 2\*\*63 \(got -1\)$", id="seed -1"),
        pytest.param(native(seed=2**63), r"^seed: .*2\*\*63", id="seed 2**63"),
        pytest.param(native(seed=2**80), r"^seed: .*\(got 1208925819614629174706176\)$", id="seed 2**80"),
        pytest.param(native(pattern={"density": float("nan")}), r"^pattern\.density: must be a finite number", id="density nan"),
        pytest.param(native(pattern={"density": 1e-9}), r"^pattern\.density: 1e-09 gives no nonzeros", id="no nonzeros"),
        pytest.param(native(pattern=5), r"^pattern: must be a mapping", id="pattern not a mapping"),
        pytest.param(_without(native(), "pattern"), r"^pattern: required field is missing", id="missing pattern"),
        pytest.param(native(pattern={"kind": "matrix_file", "path": 5}), r"^pattern\.path: must be a file path", id="path 5"),
        pytest.param(native(name="x" * 300), r"^name: must have at most 255 characters", id="long name"),
        pytest.param({**DOC_SPEC, "sparsity_pattern": {"sparsity_ratio": "high"}}, r"^sparsity_pattern\.sparsity_ratio: must be a number", id="ratio high"),
        pytest.param({**DOC_SPEC, "sparsity_pattern": [1, 2]}, r"^sparsity_pattern: must be a mapping", id="pattern list"),
        pytest.param({**DOC_SPEC, "baseline": {"a": 1}}, r"^baseline: unknown baseline \{'a': 1\}", id="baseline mapping"),
        pytest.param({**DOC_SPEC, "gpu_arch": "hopper"}, r"^gpu_arch: must be an architecture", id="doc arch named as written"),
        pytest.param({**DOC_SPEC, "gpu_arch": "sm_70"}, r"^gpu_arch: sm_70 is not supported", id="doc arch unsupported"),
        pytest.param({**DOC_SPEC, "matrix_shape": [64, True]}, r"^matrix_shape: the sizes must be positive integers", id="doc shape bool"),
        pytest.param({**DOC_SPEC, "M": 5}, r"^M: given twice", id="doc and native M"),
        pytest.param({**DOC_SPEC, "task": ["spmm"]}, r"^task: unknown task \['spmm'\]", id="task list"),
    ],
)
def test_strict_types_and_ranges(data, message):
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    assert re.search(message, str(info.value)), str(info.value)
    assert info.value.field and str(info.value).startswith(info.value.field)


def test_error_messages_quote_little_of_the_input():
    for data in (native(name=["x" * 10_000] * 50), native(M="9" * 10_000), native(**{"k" * 10_000: 1}),
                 native(pattern={"density": 0.1, "distribution": {"a": list(range(10_000))}})):
        with pytest.raises(SpecError) as info:
            parse_spec(data)
        message = str(info.value)
        assert len(message) < 300 and "\n" not in message, message
        assert max((len(m.group(0)) for m in re.finditer(r"([xk9])\1*", message)), default=0) < 80, message


# ---- memory ---------------------------------------------------------------------------------------------


def test_sizes_no_gpu_holds_are_refused_before_anything_is_allocated():
    with pytest.raises(SpecError) as info:
        parse_spec(native(M=2**20, K=2**20, N=2**20, pattern={"nnz_per_row": 1}))
    message = str(info.value)
    assert message.startswith("sizes M=1048576, K=1048576, N=1048576") and "on the GPU" in message and "141 GB" in message
    assert info.value.field == "M, K, N"


def test_sizes_this_machine_cannot_hold_are_refused(monkeypatch):
    import sparseditto.spec as spec_module

    monkeypatch.setattr(spec_module, "host_memory_bytes", lambda: 16 * 10**9)
    with pytest.raises(SpecError, match=r"in host memory, more than this machine's 16 GB"):
        parse_spec(native(M=2**30, K=2**30, N=1, pattern={"nnz_per_row": 1}))
    spec = parse_spec(native())  # small specs still fit
    need = spec_module.resource_estimate(spec)
    assert need["device"] == need["host"] == spec_module.HARNESS_COPIES * need["problem"] > 0


def test_every_example_fits_the_largest_gpu():
    from sparseditto.spec import DEVICE_MEMORY_BYTES, resource_estimate

    for path in sorted(Path(__file__).parent.parent.glob("examples/*.yaml")):
        assert resource_estimate(load_spec(path))["device"] < DEVICE_MEMORY_BYTES, path.name


# ---- files read with limits ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"operation: spmm\nname: caf\xe9\n", r"not UTF-8 text \(byte 25 is b'\\xe9'\)", id="latin-1"),
        pytest.param(bytes(range(256)), r"not a text file \(it holds NUL bytes\)", id="binary"),
        pytest.param(b"operation: spmm\nM: 4\nM: 5\n", r"line 3, column 1: duplicate key 'M'$", id="duplicate key"),
        pytest.param(b"operation: spmm\npattern: {density: 0.1, density: 0.2}\n", r"duplicate key 'density'", id="duplicate nested key"),
        pytest.param(b"m: &m 64\noperation: spmm\nM: *m\n", r"line 3, column 4: the alias \*m is not allowed", id="alias"),
        pytest.param(b"name: " + b"[" * 100 + b"]" * 100 + b"\n", r"nested more than 16 levels deep", id="deep"),
        pytest.param(b"on: 1\n", r"the key True is not a field name", id="boolean key"),
        pytest.param(b"# only a comment\n", r"the spec file is empty", id="empty"),
        pytest.param(b"- spmm\n", r"expected a mapping of fields", id="list"),
        pytest.param(b"M: " + b"9" * 5000 + b"\n", r"a number of more than 4300 digits", id="huge number"),
        pytest.param(b"name: x\n" + b"#" * (70 << 10), r"larger than 64 KiB", id="too large"),
    ],
)
def test_spec_files_are_read_with_limits(tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(str(path)), str(info.value)
    assert re.search(message, str(info.value)), str(info.value)


def test_an_alias_bomb_fails_fast_in_little_memory(tmp_path):
    import time
    import tracemalloc

    lines = ["a0: &a0 [" + ", ".join(["lol"] * 10) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 12)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\noperation: spmm\nname: *a11\n")
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(SpecError, match="alias"):
        load_spec(path)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seconds < 0.5 and peak < 16 << 20, (seconds, peak)


def test_json_duplicate_keys_are_refused(tmp_path):
    path = tmp_path / "dup.json"
    path.write_text('{"operation": "spmm", "operation": "spmv"}')
    with pytest.raises(SpecError, match="duplicate key 'operation'"):
        load_spec(path)


# ---- matrix files --------------------------------------------------------------------------------------


def _matrix_spec(tmp_path, name, data: bytes):
    (tmp_path / name).write_bytes(data)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"operation: spmm\npattern: {{kind: matrix_file, path: {name}}}\n")
    return spec


def _npz_bytes(matrix) -> bytes:
    import io

    buf = io.BytesIO()
    sp.save_npz(buf, matrix)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        pytest.param("empty.mtx", b"%%MatrixMarket matrix coordinate real general\n0 0 0\n", r"is 0 x 0: it needs at least one row", id="0x0 mtx"),
        pytest.param("none.mtx", b"%%MatrixMarket matrix coordinate real general\n5 5 0\n", r"5 x 5 matrix has no nonzeros", id="no entries"),
        pytest.param("zeros.mtx", b"%%MatrixMarket matrix array real general\n2 2\n0\n0\n0\n0\n", r"2 x 2 matrix has no nonzeros", id="all-zero array"),
        pytest.param("junk.mtx", b"hello\n", r"not a readable Matrix Market file", id="garbage mtx"),
        pytest.param("cut.mtx", b"%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n", r"cannot read it", id="truncated mtx"),
        pytest.param("big.mtx", b"%%MatrixMarket matrix coordinate real general\n3000000000 4 1\n1 1 1\n", r"int32 CSR indices", id="too many rows"),
        pytest.param("junk.npz", b"PK\x03\x04 not really", r"not a readable \.npz file", id="garbage npz"),
        pytest.param("zeros.npz", _npz_bytes(sp.csr_matrix((6, 6))), r"6 x 6 matrix has no nonzeros", id="all-zero npz"),
        pytest.param("empty.npz", _npz_bytes(sp.csr_matrix((0, 0))), r"is 0 x 0", id="0x0 npz"),
        pytest.param("matrix.txt", b"1 2 3\n", r"expected a \.mtx", id="wrong suffix"),
    ],
)
def test_bad_matrix_files_are_refused_when_the_spec_loads(tmp_path, name, data, message):
    with pytest.raises(SpecError) as info:
        load_spec(_matrix_spec(tmp_path, name, data))
    text = str(info.value)
    assert text.startswith(f"pattern.path: {name}: ") and re.search(message, text) and "\n" not in text, text
    assert info.value.field == "pattern.path"


def test_a_matrix_file_too_large_for_this_machine_is_refused_before_it_is_read(tmp_path, monkeypatch):
    import sparseditto.spec as spec_module

    monkeypatch.setattr(spec_module, "host_memory_bytes", lambda: 10**6)
    header = b"%%MatrixMarket matrix coordinate real general\n100000 100000 100000\n"
    with pytest.raises(SpecError, match=r"too large: reading it takes about .* of this machine's 1 MB"):
        load_spec(_matrix_spec(tmp_path, "large.mtx", header + b"1 1 1.0\n"))
