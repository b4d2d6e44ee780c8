"""What the CSR families (SpMV, SpMM) share: the spec fields and patterns, the matrix of a spec in canonical
CSR, its structural features, shapes, the launcher written into a run folder, and the experience key."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dataclasses
import hashlib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field, field_validator, model_validator

from sparseditto.spec import SpecBase, Strict
from sparseditto.tools import chunks
from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.dtypes import to_float64, to_storage
from sparseditto.tools.families.base import Output, Problem, ProblemFamily
from sparseditto.tools.launch_script import RUNTIME, launch_table, main_block
from sparseditto.tools.matrices import (check_matrix_file, generate_csr, matrix_shape, read_matrix, row_lengths,
                                        sorted_distinct_columns)
from sparseditto.tools.structure import bfs_levels, sampled_bands, structural_features
from sparseditto.tools.values import draw_values

if TYPE_CHECKING:
    from sparseditto.tools.contract import KernelCandidate

KERNELS_ROOT = Path(__file__).resolve().parents[2] / "knowledge_base" / "kernels"
# largest allowed ||out - ref|| / ||ref|| by value type (fp32 sums of many terms; 16-bit values rounded once)
TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1e-2}
CSR_OPERATIONS = {"spmv", "spmm"}
# the sanitizer's row slice of the main matrix: its longest rows and a random sample
SANITIZER_LONGEST, SANITIZER_ROWS = 64, 4096
class UnstructuredPattern(Strict):
    """Random nonzeros. Row lengths: equal (`uniform`), heavy-tailed (`power_law`) or near the diagonal (`banded`)."""

    kind: Literal["unstructured"] = "unstructured"
    distribution: Literal["uniform", "power_law", "banded"] = "uniform"
    density: Annotated[float, Field(gt=0, le=1)] | None = None
    nnz_per_row: Annotated[float, Field(gt=0)] | None = None
    power_law_exponent: Annotated[float, Field(gt=1.5, le=4)] = 2.5

    @model_validator(mode="after")
    def _one_density(self) -> "UnstructuredPattern":
        if (self.density is None) == (self.nnz_per_row is None):
            raise ValueError("give exactly one of 'density' (0 < d <= 1) or 'nnz_per_row' (> 0)")
        return self

    def mean_row_length(self, K: int) -> float:
        """Nonzeros per row on average, whichever of density and nnz_per_row was given."""
        return self.nnz_per_row if self.nnz_per_row is not None else self.density * K


class MatrixFilePattern(Strict):
    """A real matrix: Matrix Market (.mtx) or SciPy sparse (.npz). Its shape sets M and K."""

    kind: Literal["matrix_file"] = "matrix_file"
    path: Path

    @field_validator("path")
    @classmethod
    def _readable(cls, path: Path) -> Path:
        """The file must be a matrix this machine can read, with at least one row, column and nonzero (a
        SpecError naming pattern.path otherwise); it is parsed once per process and kept for the run."""
        check_matrix_file(path)
        return path


CsrPattern = Annotated[UnstructuredPattern | MatrixFilePattern, Field(discriminator="kind")]


class CsrSpecFields(SpecBase):
    """M x K is the sparse matrix A (its file's shape for a matrix file)."""

    pattern: CsrPattern
    M: Annotated[int, Field(ge=1, le=1 << 30)] | None = None
    K: Annotated[int, Field(ge=1, le=1 << 30)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_pattern_kind(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("pattern"), dict) and "kind" not in data["pattern"]:
            data = {**data, "pattern": {**data["pattern"], "kind": "unstructured"}}
        return data

    @model_validator(mode="after")
    def _shapes(self) -> "CsrSpecFields":
        if isinstance(self.pattern, MatrixFilePattern):
            return self
        if self.M is None or self.K is None:
            raise ValueError("M and K are required unless the pattern is a matrix file")
        per_row = self.pattern.mean_row_length(self.K)
        given = "density" if self.pattern.density is not None else "nnz_per_row"
        if per_row > self.K:
            raise ValueError(f"pattern.nnz_per_row: nnz_per_row {per_row:g} exceeds K = {self.K}")
        if per_row * self.M > 2**31 - 1:
            raise ValueError(f"pattern.{given}: {self.M} rows of {per_row:g} nonzeros are more than 2^31-1 nonzeros: "
                             "int32 CSR indices cannot hold this matrix")
        if round(per_row * self.M) < 1:
            raise ValueError(f"pattern.{given}: {getattr(self.pattern, given):g} gives no nonzeros in a {self.M} x {self.K} "
                             "matrix: nothing to compute")
        return self


def claims_csr(data: Mapping[str, Any], operation: str) -> bool:
    pattern = data.get("pattern")
    kind = pattern.get("kind", "unstructured") if isinstance(pattern, dict) else None
    return data.get("operation") == operation and isinstance(kind, str) and kind in {"unstructured", "matrix_file"}


def spec_matrix_shape(spec: CsrSpecFields) -> tuple[int, int, int]:
    """(M, K, expected nnz) of the spec's sparse matrix."""
    if isinstance(spec.pattern, MatrixFilePattern):
        return matrix_shape(spec.pattern)
    per_row = spec.pattern.mean_row_length(spec.K)
    return spec.M, spec.K, int(round(per_row * spec.M))


def spec_matrix(spec: CsrSpecFields, rng: np.random.Generator, M: int | None = None, K: int | None = None) -> sp.csr_matrix:
    """The sparse matrix for one trial; a file matrix keeps its pattern (cut to M x K) and gets fresh values per seed.
    A file's matrix is the parsed file itself, shared (`read_matrix`): read it, do not modify it."""
    if isinstance(spec.pattern, MatrixFilePattern):
        mat = read_matrix(spec.pattern.path)
        if M is not None and (M, K) != mat.shape:
            mat = mat[:M, :K].tocsr()
        return mat
    sM, sK, _ = spec_matrix_shape(spec)
    return generate_csr(spec.pattern, M or sM, K or sK, np.float32, rng)


def at_least_one(a: np.ndarray) -> np.ndarray:
    """`a`, or one zero of its dtype when it is empty: a zero-length device array cannot be passed to a kernel."""
    return a if len(a) else np.zeros(1, a.dtype)


def csr_bytes(M: int, nnz: int, dtype: str) -> int:
    return 4 * (M + 1) + nnz * (4 + dtype_info(dtype).bytes)


class CsrFamily(ProblemFamily):
    """A CSR matrix A times a dense operand; subclasses name the operand and the output and add their strategies."""

    format: ClassVar[str] = "csr"
    multilinear: ClassVar[bool] = True
    # a kernel may compute a tile's structural zeros as explicit products (tensor cores): 0 x Inf would make
    # NaN where the sparse product has no such term, so NaN and Inf go into the stored values only
    special_inputs: ClassVar[tuple[str, ...] | None] = ("values",)
    dense_name: ClassVar[str]
    output_name: ClassVar[str]
    # whether the family's cost model prices row walks, whose step features take 0.1-0.35 s at 10-30M nonzeros
    prices_row_walks: ClassVar[bool] = True
    # whether its planner reads a file's breadth-first levels (whether renumbering could band the matrix: SpMV's RCM)
    reads_bfs_levels: ClassVar[bool] = True

    @classmethod
    def claims(cls, data: Mapping[str, Any]) -> bool:
        return claims_csr(data, cls.operation)

    def dense_columns(self, spec: SpecBase) -> int:
        """N: the dense operand's width (1 for a vector)."""
        return 1

    def symbols(self, spec: SpecBase) -> dict[str, int]:
        M, K, nnz = spec_matrix_shape(spec)
        return {"M": M, "K": K, "N": self.dense_columns(spec), "nnz": nnz}

    def make_problem(self, spec: SpecBase, seed: int, shape: Mapping[str, int] | None = None) -> Problem:
        rng = np.random.default_rng(seed)
        M, K = (shape["M"], shape["K"]) if shape else (None, None)
        N = shape.get("N", self.dense_columns(spec)) if shape else self.dense_columns(spec)
        mat = spec_matrix(spec, rng, M, K)
        M, K = mat.shape
        dense_shape = (K,) if self.operation == "spmv" else (K, N)
        inputs = {
            "rowptr": mat.indptr.astype(np.int32),
            "colind": mat.indices.astype(np.int32),
            "values": to_storage(draw_values(rng, mat.nnz, spec.dtype), spec.dtype),
            self.dense_name: to_storage(draw_values(rng, math.prod(dense_shape), spec.dtype), spec.dtype).reshape(dense_shape),
        }
        out_shape = (M,) if self.operation == "spmv" else (M, N)
        return Problem(
            dtype=spec.dtype,
            symbols={"M": M, "K": K, "N": N, "nnz": mat.nnz},
            inputs=inputs,
            input_dtypes={"rowptr": "int32", "colind": "int32", "values": spec.dtype, self.dense_name: spec.dtype},
            outputs={self.output_name: Output(out_shape, spec.dtype, spec.tolerance or TOLERANCE[spec.dtype])},
        )

    def reference(self, problem: Problem) -> dict[str, np.ndarray]:
        return {self.output_name: self._product(problem, magnitudes=False)}

    def conditions(self, problem: Problem) -> dict[str, np.ndarray]:
        """|A| |B|: the reference on the inputs' magnitudes, from their float64 values instead of a copy of the
        problem rounded to storage again (the same numbers: a magnitude is exact in every type)."""
        return {self.output_name: self._product(problem, magnitudes=True)}

    def element_terms(self, problem: Problem) -> dict[str, np.ndarray]:
        """Each row's stored entries, for every element of the row: the reference on all-ones inputs, without the
        product (2.0 s of an H200 host's time at 10M nonzeros and N = 128, bench/judge_seconds.py)."""
        lengths = np.diff(problem.inputs["rowptr"]).astype(np.float64)
        return {self.output_name: lengths if self.operation == "spmv" else lengths[:, None]}

    def _product(self, problem: Problem, magnitudes: bool) -> np.ndarray:
        """A B in float64 from the stored inputs, or |A| |B| (`magnitudes`), by blocks of rows on threads (SciPy's
        product releases the interpreter lock; each row's sum is the same as in one call)."""
        s, d = problem.symbols, problem.dtype
        values, dense = to_float64(problem.inputs["values"], d), to_float64(problem.inputs[self.dense_name], d)
        if magnitudes:
            np.abs(values, out=values)
            np.abs(dense, out=dense)
        rowptr, colind = problem.inputs["rowptr"].astype(np.int64), problem.inputs["colind"]
        out = np.empty((s["M"],) + dense.shape[1:], dtype=np.float64)

        def block(_: int, start: int, stop: int) -> None:
            lo, hi = rowptr[start], rowptr[stop]
            rows = sp.csr_matrix((values[lo:hi], colind[lo:hi], rowptr[start:stop + 1] - lo), shape=(stop - start, s["K"]))
            out[start:stop] = rows @ dense

        chunks.in_row_blocks(out.shape, block)
        return out

    def flops(self, symbols: Mapping[str, int]) -> float:
        return 2.0 * symbols["nnz"] * symbols["N"]

    def min_bytes(self, symbols: Mapping[str, int], dtype: str) -> float:
        dense = (symbols["K"] + symbols["M"]) * symbols["N"] * dtype_info(dtype).bytes
        return csr_bytes(symbols["M"], symbols["nnz"], dtype) + dense

    def floor_bytes(self, symbols: Mapping[str, int], dtype: str) -> float:
        """Every value, the rows of the dense operand the nonzeros can touch (at most one per nonzero) and the output.
        The structure is left out: a preparation may make it implicit (diagonals of a stencil) or list only the
        nonempty rows, and such a kernel honestly moves less than the CSR arrays."""
        return symbols["nnz"] * dtype_info(dtype).bytes + self.operand_bytes(symbols, dtype)

    def operand_bytes(self, symbols: Mapping[str, int], dtype: str) -> float:
        """The rows of the dense operand the nonzeros can touch (at most one per nonzero) and the output."""
        s = symbols
        return (min(s["K"], s["nnz"]) + s["M"]) * s["N"] * dtype_info(dtype).bytes

    def tiny_shape(self, spec: SpecBase) -> dict[str, int]:
        return {"M": 64, "K": 64, "N": min(self.dense_columns(spec), 8)}

    def sanitizer_shape(self, spec: SpecBase) -> dict[str, int]:
        s = self.symbols(spec)
        return {"M": min(s["M"], 301), "K": min(s["K"], 263), "N": min(s["N"], 61)}

    def sanitizer_instances(self, spec: SpecBase, main: Problem, seed: int) -> dict[str, Problem]:
        """The tails instance, and the main matrix's rows a kernel may treat apart: its longest rows, its first
        and last, and a random sample (row lengths, columns and values kept), at the main shape's N."""
        rng = np.random.default_rng(seed)
        rowptr = main.inputs["rowptr"].astype(np.int64)
        M = len(rowptr) - 1
        lengths = np.diff(rowptr)
        chosen = np.concatenate([np.argsort(lengths, kind="stable")[-SANITIZER_LONGEST:], np.arange(min(M, 8)),
                                 np.arange(max(M - 8, 0), M), rng.choice(M, size=min(M, SANITIZER_ROWS), replace=False)])
        rows = np.unique(chosen)
        starts, ends = rowptr[rows], rowptr[rows + 1]
        take = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends)]) if len(rows) else np.zeros(0, np.int64)
        inputs = {**main.inputs, "rowptr": np.concatenate([[0], np.cumsum(ends - starts)]).astype(np.int32),
                  "colind": main.inputs["colind"][take], "values": main.inputs["values"][take]}
        out_shape = (len(rows),) + main.outputs[self.output_name].shape[1:]
        sliced = Problem(dtype=main.dtype, symbols={**main.symbols, "M": len(rows), "nnz": len(take)}, inputs=inputs,
                         input_dtypes=main.input_dtypes, scalars=main.scalars,
                         outputs={self.output_name: dataclasses.replace(main.outputs[self.output_name], shape=out_shape)})
        return {**super().sanitizer_instances(spec, main, seed), "longest_rows": sliced}

    def tool_class(self, main: Problem) -> str | None:
        """The same dtype and N, the longest row in the same power of two (kernels branch on row length against
        their thresholds), and rows, columns and nonzeros each in the same size band: below 2^16 (one grid
        dimension's worth of blocks), below 2^24, below 2^27 (byte offsets of 16-byte values still fit in 32 bits),
        or above. The sanitizer instances (tails, longest rows, main) of two such matrices take a kernel down the
        same paths."""
        lengths = np.diff(main.inputs["rowptr"].astype(np.int64))
        def band(n: int) -> int:
            return sum(n >= limit for limit in (1 << 16, 1 << 24, 1 << 27))
        symbols = main.symbols
        longest = int(np.log2(max(int(lengths.max(initial=0)), 1)))
        return (f"{self.name} {main.dtype} N={symbols.get('N', 1)} longest row~2^{longest} size bands "
                f"M{band(symbols['M'])} K{band(symbols['K'])} nnz{band(int(lengths.sum()))}")

    def held_out_shapes(self, spec: SpecBase, rng: np.random.Generator) -> list[dict[str, int]]:
        """Two shapes per verification: about half the spec's rows and columns with a drawn tail, and a small
        one with an odd row count; N moves by a drawn tail (SpMM). A file matrix keeps its pattern (cut)."""
        M, K, _ = spec_matrix_shape(spec)
        N = self.dense_columns(spec)

        def tail_N() -> int:
            return N if self.operation == "spmv" else (N - int(rng.integers(1, 8)) if N > 8 else N + int(rng.integers(1, 8)))

        def odd_below() -> int:
            """An odd row count below M (1 for M <= 2): never a multiple of a tile."""
            return max(1, min(2 * int(rng.integers(16, 512)) + 1, M - 1 - M % 2))

        if isinstance(spec.pattern, MatrixFilePattern):
            return [{"M": M, "K": K, "N": tail_N()}, {"M": odd_below(), "K": K, "N": tail_N()}]
        return [{"M": max(1, M // 2 + int(rng.integers(1, 64))), "K": max(1, K // 2 + int(rng.integers(1, 64))), "N": tail_N()},
                {"M": odd_below(), "K": max(1, K - int(rng.integers(1, 64))), "N": tail_N()}]

    # -- planning ----------------------------------------------------------------------------------
    def lengths_and_sample(self, spec: SpecBase) -> tuple[np.ndarray, sp.csr_matrix, np.ndarray, np.ndarray | None]:
        """The row lengths of the spec's matrix (a file's, or drawn with the spec's seed), its rows in a random
        sample of whole bands (tools/structure.py: features of the pattern are estimated on it, so that planning a
        matrix of tens of millions of nonzeros takes well under a second), those rows' indices, and the column
        counts when the whole matrix is at hand (a file)."""
        rng = np.random.default_rng(spec.seed)
        if isinstance(spec.pattern, MatrixFilePattern):
            matrix = read_matrix(spec.pattern.path)  # the parsed file itself: only read here, never modified
            rows = sampled_bands(matrix.shape[0], rng)
            sample = matrix if len(rows) == matrix.shape[0] else matrix[rows]
            return np.diff(matrix.indptr), sample, rows, np.bincount(matrix.indices, minlength=matrix.shape[1])
        M, K, _ = spec_matrix_shape(spec)
        lengths = row_lengths(spec.pattern, M, K, rng)
        rows = sampled_bands(M, rng)
        center = (rows * K) // M if spec.pattern.distribution == "banded" else None
        cols = sorted_distinct_columns(lengths[rows], K, rng, center)
        rowptr = np.concatenate([[0], np.cumsum(lengths[rows])])
        return lengths, sp.csr_matrix((np.ones(len(cols), np.float32), cols, rowptr), shape=(len(rows), K)), rows, None

    def features(self, spec: SpecBase) -> dict[str, float]:
        """The structural features (tools/structure.py), the breadth-first levels of a file's matrix where the
        planner reads them (a drawn pattern is never a renumbered mesh), and the subclass's own (the dense operand's
        width)."""
        lengths, sample, rows, column_counts = self.lengths_and_sample(spec)
        _, K, _ = spec_matrix_shape(spec)
        whole = ({"bfs_levels": bfs_levels(read_matrix(spec.pattern.path), np.random.default_rng(spec.seed))}
                 if isinstance(spec.pattern, MatrixFilePattern) and self.reads_bfs_levels else {})
        return {**structural_features(lengths, sample, rows, K, dtype_info(spec.dtype).bytes, column_counts,
                                      walks=self.prices_row_walks),
                **whole, **self.operand_features(spec)}

    def operand_features(self, spec: SpecBase) -> dict[str, float]:
        return {}

    # -- artifacts and experience ------------------------------------------------------------------
    def experience_key(self, spec: SpecBase) -> dict[str, Any]:
        """A matrix file counts by its contents, not its path."""
        key = super().experience_key(spec)
        if isinstance(spec.pattern, MatrixFilePattern):
            key["pattern"] = {"kind": "matrix_file", "sha256": hashlib.sha256(Path(spec.pattern.path).read_bytes()).hexdigest()}
        return key

    def experience_distance(self, spec: SpecBase, other: SpecBase) -> float:
        """Shapes and densities apart in log scale."""
        def density(s: SpecBase) -> float:
            M, K, nnz = spec_matrix_shape(s)
            return max(nnz, 1) / (M * K)
        return super().experience_distance(spec, other) + abs(math.log(density(spec) / density(other)))

    def launcher(self, candidate: KernelCandidate, spec: SpecBase, arch: str) -> str:
        return csr_launcher(candidate, spec, arch, self.dense_name, self.output_name, self.operation)


def csr_launcher(candidate: KernelCandidate, spec: SpecBase, arch: str, operand: str, out: str, operation: str) -> str:
    vector = operation == "spmv"
    prepare = (
        "def prepare(rowptr, colind, values):\n"
        f"    \"\"\"The one-time format preparation {candidate.preparation!r}, done by the installed sparseditto package.\"\"\"\n"
        "    from sparseditto.tools.families import get_family\n"
        "    from sparseditto.tools.families.base import Problem\n"
        "    host = {'rowptr': cp.asnumpy(rowptr), 'colind': cp.asnumpy(colind), 'values': cp.asnumpy(values)}\n"
        "    problem = Problem(dtype=DTYPE, symbols={}, inputs=host, input_dtypes={}, outputs={})\n"
        f"    arrays, symbols = get_family({spec.family!r}).preparations[{candidate.preparation!r}](problem, PARAMS)\n"
        "    return {k: cp.asarray(v) for k, v in arrays.items()}, symbols\n"
    ) if candidate.preparation else "def prepare(rowptr, colind, values):\n    return {}, {}\n"
    shape = "(K,)" if vector else "(K, N)"
    usage = (f"usage: python launch.py [--help]\n\n"
             f"This file is a module: `from launch import run, prepare` in your own code (the folder on sys.path), then\n"
             f"  {out} = run(rowptr, colind, values, {operand})\n"
             f"with CuPy arrays on the GPU: rowptr (M+1,) and colind (nnz,) int32, columns sorted within each row,\n"
             f"values (nnz,) and {operand} {shape} {spec.dtype}, row-major. kernel.cu sits next to it (NVRTC compiles it\n"
             f"at the first call, for {arch}); build.sh builds it with nvcc instead. Without CuPy or a CUDA device,\n"
             f"run() raises NoCudaDevice.")
    return f'''"""Run {candidate.label()} on your own CSR matrix with CuPy.

    from launch import run
    {out} = run(rowptr, colind, values, {operand})   # CuPy arrays: int32 CSR (sorted columns), {spec.dtype} values

16-bit values are passed as raw bits (cupy.uint16) for bf16 and as cupy.float16 for fp16.
Needs CuPy and a CUDA device; `python launch.py --help` says how to call it.
"""
{RUNTIME}

DTYPE = {spec.dtype!r}
PARAMS = {dict(candidate.parameters)!r}
OPTIONS = ("--gpu-architecture={arch}", "--std=c++17")
SOURCE = (Path(__file__).parent / "kernel.cu").read_text()


def ceil_div(a, b):
    return -(-a // b)


{launch_table(candidate)}


{prepare}
_module = None


def run(rowptr, colind, values, {operand}, prepared=None):
    """One call of the kernel sequence; pass `prepared=prepare(rowptr, colind, values)` to reuse the preparation.
    Raises NoCudaDevice without CuPy or a CUDA device."""
    global _module
    if _module is None:
        require_device()
        _module = cp.RawModule(code=SOURCE, options=OPTIONS, backend="nvrtc")
    M = len(rowptr) - 1
    K = {"len(x)" if vector else "B.shape[0]"}
    N = {"1" if vector else "B.shape[1]"}
    arrays, extra = prepared if prepared is not None else prepare(rowptr, colind, values)
    {out} = cp.empty({"(M,)" if vector else "(M, N)"}, dtype=values.dtype)
    s = {{"M": M, "K": K, "N": N, "nnz": len(colind), "value_bytes": values.dtype.itemsize,
         "num_sms": cp.cuda.Device().attributes["MultiProcessorCount"], **PARAMS, **extra}}
    buffers = {{"rowptr": rowptr, "colind": colind, "values": values, {operand!r}: {operand}, {out!r}: {out}, **arrays}}
    for name, (kind, size) in WORKSPACE.items():
        buffers[name] = cp.empty(size(s), dtype={{"fp32": cp.float32, "int32": cp.int32, "value": values.dtype}}[kind])
    for entry, grid, block, smem, args in LAUNCHES:
        fn = _module.get_function(entry)
        if smem(s) > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = smem(s)
        fn(grid(s), block(s), tuple(buffers[a] if a in buffers else np.int32(s[a]) for a in args), shared_mem=smem(s))
    return {out}


{main_block(usage)}'''
