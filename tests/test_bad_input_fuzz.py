"""Bad specs and matrix files, generated from a fixed seed, through `sparseditto run` exactly as a user meets them.

Each case must end with exit code 2 and one line, `error: ...`, that names the field or the file (never a
traceback, never a run), quickly and in bounded memory: wrong types per field, out-of-range numbers, unknown
and missing fields, sizes no machine holds, YAML oddities (duplicate keys, aliases and alias bombs, binary
bytes, deep nesting, very long strings), broken, empty and all-zero matrix files. Most go through typer's
CliRunner in this process; a handful through a real `sparseditto` subprocess.
"""

from __future__ import annotations

import json
import random
import re
import resource
import subprocess
import sys
import time
import tracemalloc
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import yaml

from sparseditto.errors import SpecError
from sparseditto.spec import load_spec

SEED = 20261201
PER_CASE_SECONDS = 2.0
PER_CASE_PEAK_BYTES = 64 << 20  # traced Python allocations of one in-process case
RSS_GROWTH_BYTES = 512 << 20  # the test process's high-water mark over all in-process cases

NATIVE_SPMM = {"operation": "spmm", "pattern": {"distribution": "uniform", "density": 0.05}, "M": 96, "K": 80, "N": 16}
NATIVE_SPMV = {"operation": "spmv", "pattern": {"distribution": "power_law", "nnz_per_row": 4}, "M": 96, "K": 80}
DOC = {"task": "sparse_matmul_kernel", "sparsity_pattern": {"type": "unstructured", "sparsity_ratio": 0.95},
       "matrix_shape": [128, 128], "dtype": "fp16", "gpu_arch": "sm_90", "baseline": "dense_cublas"}

# values of the wrong type or out of range, per field (each refused whatever else the spec says)
SIZE_BAD = [True, False, "high", [1, 2], {"a": 1}, 0, -1, 1.5, 2**31, 2**80, None, float("nan"), "1e3x"]
BAD_VALUES: dict[str, list] = {
    "M": SIZE_BAD,
    "K": SIZE_BAD,
    "N": [v for v in SIZE_BAD if v is not None] + [2**20 + 1],
    "name": [5, True, [], {"a": 1}, "", "x" * 300, None, 1.5],
    "operation": [5, "convolution", [], True, None, {"op": "spmm"}, "SpMM"],
    "dtype": ["fp64", 32, True, [], None, "FP32", {"a": 1}],
    "arch": ["sm_70", "hopper", 90, True, [], "sm_9000", "sm90"],
    "baselines": ["mkl", ["mkl"], [1], {"a": 1}, True, 5, ["x"] * 40],
    "tolerance": [0, 1, -1, "abc", True, [], float("inf"), 2.5],
    "budget": [5, "x", [], {"iterations": 0}, {"iterations": True}, {"iterations": 10**4}, {"wall_seconds": -1},
               {"foo": 1}, {"iterations": 2.5}, {"wall_seconds": float("nan")}],
    "seed": [-1, 2**63, 2**80, 1.5, "x", True, [], -(2**70)],
    "pattern": [5, "uniform", [], {"density": 0}, {"density": 1.5}, {"density": True}, {"density": "high"},
                {"distribution": "zipf", "density": 0.1}, {"density": 0.1, "nnz_per_row": 3}, {},
                {"kind": 5, "density": 0.1}, {"kind": [1]}, {"density": 0.1, "power_law_exponent": 9},
                {"nnz_per_row": -2}, {"nnz_per_row": 10**6}, {"density": float("nan")}, {"density": 1e-9},
                {"kind": "matrix_file"}, {"kind": "matrix_file", "path": 5}, {"kind": "matrix_file", "path": []},
                {"kind": "matrix_file", "path": "nowhere.mtx"}, {"density": 0.1, "colour": "red"}],
}
DOC_BAD: dict[str, list] = {
    "task": [5, "sparse_conv_kernel", [], True, None],
    "sparsity_pattern": [[1, 2], "x", 5, {"sparsity_ratio": "high"}, {"sparsity_ratio": 1}, {"sparsity_ratio": True},
                         {"sparsity_ratio": -0.1}, {"type": [1]}, {"type": "checkerboard"}, {"type": 5},
                         {"sparsity_ratio": 0.9, "density": 0.1}, {"sparsity_ratio": 0.9, "foo": 1}],
    "matrix_shape": [[64], [64, True], "64x64", [0, 64], [64, 64, 64, 64], [1.5, 64], 64, [[64], 64]],
    "baseline": [{"a": 1}, "mkl", [1], [], True, [["cublas"]]],
    "gpu_arch": [5, "hopper", "sm_70", True, []],
}
# sizes whose operands alone do not fit the largest GPU supported (so they are refused on any machine)
HUGE = [
    {**NATIVE_SPMM, "M": 2**30, "K": 2**30, "N": 64, "pattern": {"nnz_per_row": 1}},
    {**NATIVE_SPMM, "M": 2**20, "K": 2**20, "N": 2**20, "pattern": {"nnz_per_row": 1}},
    {**NATIVE_SPMM, "M": 2**30, "K": 2**20, "N": 2**20, "pattern": {"nnz_per_row": 1}},
    {**NATIVE_SPMV, "M": 2**30, "K": 2**30, "pattern": {"nnz_per_row": 2}},
    {**NATIVE_SPMM, "M": 2**28, "K": 2**28, "N": 2**12, "pattern": {"density": 1e-8}},
    {**NATIVE_SPMM, "M": 2**30, "K": 2**30, "N": 2**20, "pattern": {"nnz_per_row": 1}},
    {**DOC, "matrix_shape": [2**20, 2**20, 2**20], "sparsity_pattern": {"sparsity_ratio": 0.999999}},
    {**DOC, "matrix_shape": [2**30, 2**30], "sparsity_pattern": {"sparsity_ratio": 0.9999999999}},
]


@dataclass
class Case:
    id: str
    files: dict[str, bytes]  # file name -> contents; the spec is `spec`
    spec: str
    expect: str  # a regular expression the error line must match: the field or the file it is about
    traced: bool = False  # measure the peak of its Python allocations
    extra: dict[str, str] = field(default_factory=dict)  # environment variables


def _dump(data: object, rng: random.Random) -> tuple[str, bytes]:
    if rng.random() < 0.25 and not _has_non_json(data):
        return "spec.json", json.dumps(data).encode()
    return "spec.yaml", yaml.safe_dump(data, allow_unicode=True).encode()


def _has_non_json(data: object) -> bool:
    if isinstance(data, dict):
        return any(_has_non_json(v) for v in data.values())
    if isinstance(data, list):
        return any(_has_non_json(v) for v in data)
    return isinstance(data, float) and not np.isfinite(data)


def _field_pattern(name: str) -> str:
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


def _dict_case(case_id: str, data: dict, expect: str, rng: random.Random, traced: bool = False) -> Case:
    name, text = _dump(data, rng)
    return Case(case_id, {name: text}, name, expect, traced)


def _field_cases(rng: random.Random) -> list[Case]:
    cases = []
    for base_name, base in (("spmm", NATIVE_SPMM), ("spmv", NATIVE_SPMV)):
        for fld, values in BAD_VALUES.items():
            if base_name == "spmv" and fld in {"name", "dtype", "arch", "tolerance", "budget"}:
                continue  # the same code as for spmm
            for i, value in enumerate(values):
                if fld == "N" and base_name == "spmv" and value in (2**20 + 1,):
                    continue
                data = {**base, fld: value}
                expect = _field_pattern(fld) if fld not in {"M", "K"} or value is not None else r"\bM\b.*\bK\b"
                if fld == "pattern" and isinstance(value, dict) and value.get("kind") == "matrix_file" and isinstance(value.get("path"), str):
                    expect = r"pattern\.path"
                cases.append(_dict_case(f"{base_name}-{fld}-{i}", data, expect, rng))
    for fld, values in DOC_BAD.items():
        for i, value in enumerate(values):
            cases.append(_dict_case(f"doc-{fld}-{i}", {**DOC, fld: value}, _field_pattern(fld), rng))
    return cases


def _unknown_and_missing(rng: random.Random) -> list[Case]:
    cases = []
    for i in range(12):
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(1, 12))) + "x"
        where = rng.choice(["top", "pattern", "budget"])
        data = json.loads(json.dumps(NATIVE_SPMM))
        if where == "top":
            data[word] = rng.choice([1, "a", [1], {"b": 2}])
        elif where == "pattern":
            data["pattern"][word] = 1
        else:
            data["budget"] = {"iterations": 2, word: 1}
        cases.append(_dict_case(f"unknown-{where}-{i}", data, _field_pattern(word), rng))
    for fld in ("operation", "M", "K", "pattern"):
        data = {k: v for k, v in NATIVE_SPMM.items() if k != fld}
        expect = {"M": r"\bM\b", "K": r"\bK\b"}.get(fld, _field_pattern(fld))
        cases.append(_dict_case(f"missing-{fld}", data, expect, rng))
    cases.append(_dict_case("missing-density", {**NATIVE_SPMM, "pattern": {"distribution": "uniform"}}, r"density", rng))
    cases.append(_dict_case("missing-task-fields", {"task": "spmm"}, r"M\b.*K|matrix_shape|sparsity", rng))
    cases.append(_dict_case("doc-and-native-M", {**DOC, "M": "x"}, r"\bM\b", rng))
    for i, data in enumerate(HUGE):
        expect = r"matrix_shape|sizes M=" if "task" in data else r"sizes M=|pattern\.nnz_per_row.*2\^31-1"
        cases.append(_dict_case(f"huge-{i}", data, expect, rng, traced=True))
    return cases


def _yaml_cases(rng: random.Random) -> list[Case]:
    valid = yaml.safe_dump(NATIVE_SPMM)
    texts: dict[str, bytes] = {
        "duplicate-top": (valid + "M: 65\n").encode(),
        "duplicate-nested": b"operation: spmm\npattern: {density: 0.1, density: 0.2}\nM: 64\nK: 64\n",
        "duplicate-quoted": (valid + "'K': 3\n").encode(),
        "alias": b"base: &b 64\noperation: spmm\npattern: {density: 0.1}\nM: *b\nK: 64\n",
        "merge-key": b"base: &b {M: 64, K: 64}\n<<: *b\noperation: spmm\npattern: {density: 0.1}\n",
        "bool-key": (valid + "on: 1\n").encode(),
        "int-key": (valid + "7: 1\n").encode(),
        "complex-key": b"? [a, b]\n: 1\noperation: spmm\n",
        "tab-indent": b"operation: spmm\n\tM: 4\n",
        "unclosed-flow": b"operation: spmm\npattern: {density: 0.1\nM: 4\n",
        "python-tag": b"operation: !!python/object/apply:os.system ['echo hi']\n",
        "custom-tag": b"operation: !thing spmm\n",
        "empty": b"",
        "comments-only": b"# nothing here\n# at all\n",
        "scalar": b"spmm\n",
        "list": b"- operation\n- spmm\n",
        "null-doc": b"~\n",
        "two-documents": (valid + "---\n" + valid).encode(),
        "nul-bytes": b"operation: spmm\x00\nM: 4\n",
        "binary": bytes(rng.randrange(256) for _ in range(600)),
        "binary-zeros-free": bytes(rng.choice([0x80, 0xC3, 0xFF, 0xFE, 0x9F, 0x41]) for _ in range(600)),
        "latin1": "operation: spmm\nname: caf\u00e9\nM: 4\n".encode("latin-1"),
        "utf16": ("\ufeff" + valid).encode("utf-16"),
        "control-char": b"operation: spmm\x07\n",
        "bidi-escape": "operation: \"spmm\\e[2J\"\n".encode(),
        "too-large": (valid + "# " + "x" * (70 << 10) + "\n").encode(),
        "long-name-in-cap": (valid + "name: " + "n" * 20000 + "\n").encode(),
        "long-key-in-cap": (valid + "k" * 20000 + ": 1\n").encode(),
        "long-value-in-cap": (valid.replace("spmm", "s" * 30000)).encode(),
        "huge-integer": (valid.replace("M: 96", "M: " + "9" * 5000)).encode(),
        "deep-flow": ("name: " + "[" * 3000 + "]" * 3000 + "\n").encode(),
        "deep-map": ("operation: spmm\npattern: " + "{a: " * 200 + "1" + "}" * 200 + "\n").encode(),
        "deep-block": ("".join("  " * i + f"k{i}:\n" for i in range(40)) + "  " * 40 + "v\n").encode(),
        "many-items": (valid + "baselines: [" + ", ".join(["cusparse"] * 5000) + "]\n").encode(),
        "date-size": (valid.replace("M: 96", "M: 2024-01-01")).encode(),
        "binary-tag": b"operation: !!binary c3BtbQ==\npattern: {density: 0.1}\nM: 64\nK: 64\n",
        "set-tag": b"operation: !!set {spmm}\n",
        "markup-key": (valid + "'[/red][bold]x': 1\n").encode(),
        "newline-key": (valid + "\"a\\nb\": 1\n").encode(),
    }
    levels = 9
    bomb = "a0: &a0 [" + ", ".join(["lol"] * 9) + "]\n"
    for i in range(1, levels):
        bomb += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n"
    texts["alias-bomb"] = (bomb + f"operation: spmm\nname: *a{levels - 1}\n").encode()
    texts["alias-bomb-json-like"] = (bomb + f"pattern: {{density: *a{levels - 1}}}\noperation: spmm\n").encode()
    # the cases that parse name the field at fault; the others the file
    fields = {"long-name-in-cap": r"'name'", "long-value-in-cap": r"'operation'",
              "date-size": r"'M'", "binary-tag": r"'operation'", "set-tag": r"'operation'", "bidi-escape": r"'operation'",
              "markup-key": re.escape("spec field '[/red][bold]x'"), "newline-key": re.escape("spec field 'a\\nb'"),
              "many-items": r"'baselines'"}
    cases = [Case(f"yaml-{k}", {"spec.yaml": v}, "spec.yaml", fields.get(k, r"^error: \S*spec\.yaml: "), traced=True)
             for k, v in texts.items()]
    json_texts = {
        "json-invalid": b'{"operation": "spmm",',
        "json-duplicate": b'{"operation": "spmm", "operation": "spmv"}',
        "json-deep": b"[" * 50000 + b"]" * 50000,
        "json-nan": json.dumps({**NATIVE_SPMM, "pattern": {"density": float("nan")}}).encode(),
        "json-huge-int": b'{"operation": "spmm", "M": ' + b"1" * 5000 + b"}",
        "json-list": b"[1, 2]",
        "json-binary": bytes(rng.randrange(1, 256) for _ in range(300)),
        "json-deep-map": ('{"operation": "spmm", "pattern": ' + '{"a": ' * 300 + "1" + "}" * 301).encode(),
    }
    fields = {"json-nan": r"'pattern\.density'", "json-deep-map": r"pattern\.a\.a.*nested"}
    cases += [Case(k, {"spec.json": v}, "spec.json", fields.get(k, r"^error: \S*spec\.json: "), traced=True)
              for k, v in json_texts.items()]
    return cases


def _mtx(rows: int, cols: int, entries: list[tuple[int, int, float]], header: str = "coordinate real general") -> bytes:
    body = "".join(f"{i} {j} {v}\n" for i, j, v in entries)
    return f"%%MatrixMarket matrix {header}\n{rows} {cols} {len(entries)}\n{body}".encode()


def _npz(matrix: sp.spmatrix) -> bytes:
    import io

    buf = io.BytesIO()
    sp.save_npz(buf, matrix)
    return buf.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _matrix_cases(rng: random.Random) -> list[Case]:
    files: dict[str, bytes] = {
        "garbage.mtx": bytes(rng.randrange(256) for _ in range(500)),
        "text-garbage.mtx": b"hello world\n1 2 3\n",
        "no-banner.mtx": b"3 3 1\n1 1 1.0\n",
        "bad-header.mtx": b"%%MatrixMarket matrix coordinate real general\nthree 3 1\n1 1 1.0\n",
        "negative.mtx": b"%%MatrixMarket matrix coordinate real general\n-3 3 1\n1 1 1.0\n",
        "truncated.mtx": b"%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n",
        "bad-value.mtx": b"%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n2 2 x\n",
        "out-of-range.mtx": b"%%MatrixMarket matrix coordinate real general\n3 3 1\n9 9 1.0\n",
        "zero-by-zero.mtx": _mtx(0, 0, []),
        "zero-rows.mtx": _mtx(0, 5, []),
        "no-entries.mtx": _mtx(5, 5, []),
        "all-zero-array.mtx": b"%%MatrixMarket matrix array real general\n2 2\n0\n0\n0\n0\n",
        "huge-declared.mtx": b"%%MatrixMarket matrix coordinate real general\n3000000000 3000000000 1\n1 1 1.0\n",
        "huge-dense.mtx": b"%%MatrixMarket matrix array real general\n1000000 1000000\n1.0\n",
        "empty.mtx": b"",
        "garbage.npz": bytes(rng.randrange(256) for _ in range(500)),
        "zip-no-arrays.npz": _zip({"hello.txt": b"hi"}),
        "zip-bad-arrays.npz": _zip({"shape.npy": b"nope", "format.npy": b"nope", "data.npy": b"nope"}),
        "dense.npz": _zip({"arr_0.npy": b"\x93NUMPY"}),
        "all-zero.npz": _npz(sp.csr_matrix((6, 6))),
        "zero-by-zero.npz": _npz(sp.csr_matrix((0, 0))),
        "truncated.npz": _npz(sp.random(20, 20, density=0.2, format="csr", random_state=1))[:200],
        "matrix.txt": b"1 2 3\n",
        "empty.npz": b"",
    }
    cases = []
    for name, data in files.items():
        spec = f"operation: {rng.choice(['spmm', 'spmv'])}\npattern: {{kind: matrix_file, path: {name}}}\n"
        cases.append(Case(f"matrix-{name}", {name: data, "spec.yaml": spec.encode()}, "spec.yaml",
                          rf"pattern\.path.*{re.escape(name)}", traced=True))
    cases.append(Case("matrix-missing", {"spec.yaml": b"operation: spmm\npattern: {kind: matrix_file, path: nope.mtx}\n"},
                      "spec.yaml", r"pattern\.path.*nope\.mtx"))
    cases.append(Case("matrix-directory", {"sub/x.txt": b"", "spec.yaml": b"operation: spmm\npattern: {kind: matrix_file, path: sub}\n"},
                      "spec.yaml", r"pattern\.path.*sub"))
    cases.append(Case("matrix-nul-path", {"spec.yaml": b"operation: spmm\npattern: {kind: matrix_file, path: \"a\\0b.mtx\"}\n"},
                      "spec.yaml", r"pattern\.path"))
    cases.append(Case("matrix-path-int", {"spec.yaml": b"operation: spmm\npattern: {kind: matrix_file, path: 5}\n"},
                      "spec.yaml", r"pattern\.path"))
    big = _mtx(50, 40, [(1, 1, 1.0), (2, 3, 2.0)])
    cases.append(Case("matrix-with-N-too-wide", {"m.mtx": big, "spec.yaml": b"operation: spmv\nN: 4\npattern: {kind: matrix_file, path: m.mtx}\n"},
                      "spec.yaml", r"\bN\b"))
    return cases


def generated_cases() -> list[Case]:
    rng = random.Random(SEED)
    return _field_cases(rng) + _unknown_and_missing(rng) + _yaml_cases(rng) + _matrix_cases(rng)


CASES = generated_cases()


def _write(folder: Path, case: Case) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder / case.spec


def _check_output(case: Case, exit_code: int, output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert exit_code == 2, f"{case.id}: exit code {exit_code}: {output[-2000:]}"
    assert "Traceback" not in output, f"{case.id}: {output[-2000:]}"
    assert len(lines) == 1, f"{case.id}: {len(lines)} lines: {output[:2000]}"
    line = lines[0]
    assert line.startswith("error: "), f"{case.id}: {line}"
    assert "could not be validated" not in line, f"{case.id}: a validator bug: {line}"
    assert re.search(case.expect, line), f"{case.id}: the line does not name {case.expect!r}: {line}"
    assert len(line) <= 500, f"{case.id}: {len(line)} characters"
    return line


def test_the_generator_makes_enough_distinct_cases():
    assert len(CASES) >= 200
    assert len({c.id for c in CASES}) == len(CASES)
    assert generated_cases()[17].files == CASES[17].files  # seeded: the same cases every time


def test_every_bad_input_is_one_clear_line_in_process(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # a narrow terminal: the error line must still be one line
    runs = tmp_path / "runs"
    _write(tmp_path / "warm", CASES[0])
    cli("run", tmp_path / "warm" / CASES[0].spec, "--runs-dir", runs, "--compile-only")  # imports done before measuring
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    slowest, failures = (0.0, ""), []
    for i, case in enumerate(CASES):
        spec = _write(tmp_path / f"c{i}", case)
        if case.traced:
            tracemalloc.start()
        start = time.perf_counter()
        out = cli("run", spec, "--runs-dir", runs, "--compile-only")
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] if case.traced else 0
        if case.traced:
            tracemalloc.stop()
        try:
            _check_output(case, out.exit_code, out.output)
            assert seconds < PER_CASE_SECONDS, f"{case.id}: {seconds:.2f} s"
            assert peak < PER_CASE_PEAK_BYTES, f"{case.id}: {peak / 2**20:.0f} MiB traced"
        except AssertionError as exc:
            failures.append(str(exc).split("\nassert")[0])
        slowest = max(slowest, (seconds, case.id))
    assert not failures, f"{len(failures)} of {len(CASES)} cases:\n" + "\n".join(failures[:40])
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    assert grown < RSS_GROWTH_BYTES, f"max RSS grew by {grown / 2**20:.0f} MiB"
    assert not runs.exists() or not any(p.is_dir() for p in runs.iterdir()), "a bad spec started a run"
    print(f"{len(CASES)} cases; slowest {slowest[1]} {slowest[0]:.2f} s")


def test_every_bad_spec_file_is_a_spec_error_from_load_spec(tmp_path):
    """The Python API reads files the same way: a SpecError of one line, never another exception."""
    for i, case in enumerate(CASES):
        spec = _write(tmp_path / f"c{i}", case)
        with pytest.raises(SpecError) as info:
            load_spec(spec)
        message = str(info.value)
        assert "\n" not in message and len(message) <= 400, case.id


SUBPROCESS_CASES = ["yaml-alias-bomb", "yaml-binary", "spmm-M-0", "matrix-garbage.npz", "huge-1"]


# runs the command and reports its peak memory on a last line of stderr
_MEASURE = ("import resource, subprocess, sys\n"
            "code = subprocess.run(sys.argv[1:]).returncode\n"
            "print(f'max_rss_kib={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', file=sys.stderr)\n"
            "sys.exit(code)\n")


@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_a_real_subprocess_prints_one_line(tmp_path, case_id):
    case = next(c for c in CASES if c.id == case_id)
    spec = _write(tmp_path, case)
    exe = Path(sys.executable).with_name("sparseditto")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _MEASURE, str(exe), "run", str(spec), "--runs-dir", str(tmp_path / "runs"),
                           "--compile-only"], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "80", "HOME": str(tmp_path)})
    seconds = time.perf_counter() - start
    stderr, _, measured = proc.stderr.rstrip("\n").rpartition("\n")
    if not measured.startswith("max_rss_kib="):
        stderr, measured = "", proc.stderr.strip()
    _check_output(case, proc.returncode, proc.stdout + stderr)
    assert seconds < 30, f"{seconds:.1f} s (most of it the interpreter starting)"
    rss = int(measured.removeprefix("max_rss_kib=")) * 1024
    assert rss < 1 << 30, f"the command reached {rss / 2**20:.0f} MiB"


@pytest.mark.parametrize(("variable", "value"), [("SPARSEDITTO_ON_BUDGET", "bogus"), ("SPARSEDITTO_COMPILE_ONLY", "maybe"),
                                                 ("SPARSEDITTO_LLM_TEMPERATURE", "hot"), ("SPARSEDITTO_CONTEXT_CHARS", "-5")])
def test_a_bad_setting_names_its_variable(tmp_path, cli, monkeypatch, examples_dir, variable, value):
    monkeypatch.setenv(variable, value)
    out = cli("run", examples_dir / "small_spmm.yaml", "--runs-dir", tmp_path, "--compile-only")
    case = Case("setting", {}, "", re.escape(variable))
    line = _check_output(case, out.exit_code, out.output)
    assert value in line
