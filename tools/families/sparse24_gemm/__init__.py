"""C = act(alpha * A B + bias) with A 2:4 structured sparse (compressed for the sparse tensor cores), B and C dense.

A (M x K) keeps two of every aligned group of four along K, stored compressed (`compression.py`): `A_values`
(M x K/2) and `A_meta` (2-bit positions in the register order of `mma.sp`). B is K x N and C M x N, both
row-major. The epilogue scales by the float32 scalar `alpha` (drawn per instance when the spec asks for scaling,
else 1), adds a per-row `bias` (length M, in C's type) and applies ReLU or the tanh form of GELU. Inputs are fp16,
bf16 or fp8 e4m3 (with fp16 output); products accumulate in fp32.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from sparseditto.spec import SpecBase, Strict
from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.dtypes import to_float64, to_storage
from sparseditto.tools.families.base import Output, Problem, ProblemFamily, StrategyStart
from sparseditto.tools.families.csr_common import KERNELS_ROOT
from sparseditto.tools.families.sparse24_gemm.compression import decompress, pack_meta
from sparseditto.tools.families.sparse24_gemm.launcher import sparse24_launcher
from sparseditto.tools.families.sparse24_gemm.pattern import load_dense, magnitude_positions, random_positions
from sparseditto.tools.families.sparse24_gemm.preparations import epilogue_operands
from sparseditto.tools.values import ElementBounds, draw_values

ROW_ALIGN, K_ALIGN = 16, 64  # M and K multiples: one metadata block, one fp8 m16n8k64 step
SKINNY_N = 64  # at most this many columns of B the product streams A once and is memory-bound
# where wgmma.sp exists (compiled for sm_90a); no arch: the GPU found decides, and elsewhere the kernel is refused
# at compile time and mma.sp follows
HOPPER = (None, "sm_90", "sm_90a")
WGMMA_MIN_MN = 256  # smaller M or N leave most SMs without a 128 x 256 tile: mma.sp's smaller tiles fit them
# H200 (bench/NOTES.md): B by TMA 241 -> 156 us at 4096^3 fp16 (256 x 128 x 128, 3 stages; session 9; CLUSTER 2 and
# INFLIGHT 1 with B by cp.async slower or no faster); tile rows in bands of 8 (RASTER 8) 1180 -> 1080 us at 8192^3 fp16
# and 1165 -> 1045 us in bf16, 160 -> 157 us at 4096^3; PERSIST 1 within 2% of it either way (session 10)
WGMMA_START = {"BM": 256, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 8, "PERSIST": 0, "CONSUMERS": 2}
# e4m3 (sp24_wgmma_sp_fp8): 128 x 128 tiles, since promoting the products (see ALIGNED_SUM_BITS) needs two scratch
# arrays beside the accumulators; 256 logical columns of K are 128 bytes of each A row and of each Bt row;
# persistent: 952-956 us at 8192^3 against 980-984 launched per tile, promoted every instruction (session 13,
# evals/results/issue15_h200/explore_fp8_session13_h200.txt); promoted every 2 instructions: the product alone 715 us
# against 912 every instruction and 872 every 4 (session 14, fp8_transpose_share_session14_h200.txt)
WGMMA_FP8_START = {**WGMMA_START, "BM": 128, "BK": 256, "STAGES": 4, "PERSIST": 1, "PROMOTE": 2, "SCRATCH": 2}
ACTIVATIONS = {"none": 0, "relu": 1, "gelu_tanh": 2}
# largest ||C - ref|| / ||ref|| by output type, for GELU epilogues (judged norm-wise): one rounding to C's type
# dominates fp32 sums of K/2 exact products
TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2}
# fp8 inputs give fp16 outputs (the range of e4m3 products summed over K needs it)
OUTPUT_DTYPE = {"fp16": "fp16", "bf16": "bf16", "fp8_e4m3": "fp16"}
# e4m3 tensor-core instructions on Hopper add their products aligned to the largest, keeping only some bits below it,
# so each product loses up to a unit of the instruction's largest term, not of its own: even one instruction (K = 64)
# misses the plain fp32 bound. Measured on the family's values at M 560, N 1024, K 64-1088, 8 draws each
# (evals/results/issue15_h200/fp8_small_k_session14_h200.txt), the largest |C - ref| beyond the fp32 bound, as a share
# of the element's condition: 3.6e-4 for this family's kernel at K = 64 (one instruction, promoted), 5.4e-4 promoting
# every 2 instructions, 7.4e-4 every 4; dense fp8 cuBLASLt with its default promotion 6.8e-4 (K = 128), with fast
# accumulation 7.4e-4. So the bound adds 2^-10 = 9.8e-4 of the condition (tools/values.py element_bound): 1.4 times
# the vendor default's worst, 1.3 times that of promotion every 4 and of fast accumulation (8 draws per K). Session
# 13's 2^-13 was fitted at K >= 400, where the fp32 part hides most of it, and refused dense cuBLASLt's default at
# every K up to 384. At this allowance the per-element check tells neither promoted sums from fast accumulation nor
# e4m3 from fp16 accumulation at the measured sizes; the norm-wise error tells the first apart (8192^3: 2.3e-4
# promoted, 1.3e-3 fast, fp8_accumulation_session13_h200.txt).
ALIGNED_SUM_BITS = {"fp8_e4m3": 10}


# products at least this large (multiply-adds) go to the GPU's float64 GEMM when one is usable: at 16384^3 a host
# product takes tens of seconds, and a verification makes two (value and condition) for each of about six problems
GPU_REFERENCE_MIN_MACS = 1 << 30


@functools.cache
def _gpu_usable() -> bool:
    from sparseditto.tools.baselines.sparse24_dense import cupy_status  # the baselines' own check, asked once

    return cupy_status().startswith("available")


def float64_product(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A @ B in float64: on the GPU (cuBLAS DGEMM, IEEE float64 like the host's) when it is large, a device is usable
    and it fits the free memory, else on the host. The product's device copy is overwritten with NaN before it is
    freed, so that no candidate launched later in the process finds a right answer in memory it did not write."""
    if A.shape[0] * A.shape[1] * B.shape[1] < GPU_REFERENCE_MIN_MACS or not _gpu_usable():
        return A @ B
    import cupy as cp

    needed = 8 * (A.size + B.size + A.shape[0] * B.shape[1])
    if cp.cuda.runtime.memGetInfo()[0] < 2 * needed:
        return A @ B
    product = cp.asarray(A) @ cp.asarray(B)
    host = cp.asnumpy(product)
    product.fill(cp.nan)
    cp.cuda.get_current_stream().synchronize()
    return host


def stream_start(n_tiles: int) -> dict[str, int]:
    """sp24_stream's start for NT = n_tiles: 16 warps of UP pairs each (B fragments of UP * NT * 8 registers; the
    B rows staged once must fit a ring slot and the accumulator buffers) and 3 stages, so that a block fits the
    163 KB of shared memory of an A100 as well as a Hopper GPU (with 8 n-tiles 8 warps: their accumulator buffers
    are 8 KB each). The K slices' partial sums cost NT / (WARPS * UP) of A's traffic: 6% at N <= 16."""
    return {"MT": 1, "NT": n_tiles, "WARPS": 16 if n_tiles <= 4 else 8, "UP": 2 if n_tiles <= 2 else 1, "STAGES": 3,
            "BPS": 1}


class Sparse24Pattern(Strict):
    """2:4 along K. `source: random` draws each group's two kept positions from the spec's seed;
    `source: magnitude` prunes the dense matrix in `path` (.npy, M x K; it sets M and K) to its two largest
    |a| per group. Values are drawn per instance either way: the pattern is what the file gives."""

    kind: Literal["n_m"] = "n_m"
    n: Literal[2] = 2
    m: Literal[4] = 4
    source: Literal["random", "magnitude"] = "random"
    path: Path | None = None

    @model_validator(mode="after")
    def _path_with_magnitude(self) -> "Sparse24Pattern":
        if self.source == "magnitude" and self.path is None:
            raise ValueError("source magnitude needs path: the dense matrix (.npy) to prune")
        if self.source == "random" and self.path is not None:
            raise ValueError("path is only for source magnitude (random patterns need none)")
        if self.path is not None:
            load_dense(self.path)  # SpecError naming pattern.path when the file will not do
        return self


class Epilogue(Strict):
    """What follows the product, in this order: scaling by alpha, the per-row bias, the activation."""

    alpha: bool = False
    bias: bool = False
    activation: Literal["none", "relu", "gelu_tanh"] = "none"


class Sparse24GemmSpec(SpecBase):
    family: Literal["sparse24_gemm"] = "sparse24_gemm"
    operation: Literal["spmm"] = "spmm"
    dtype: Literal["fp16", "bf16", "fp8_e4m3"] = "fp16"
    pattern: Sparse24Pattern = Sparse24Pattern()
    M: Annotated[int, Field(ge=ROW_ALIGN, le=1 << 20)] | None = None
    K: Annotated[int, Field(ge=K_ALIGN, le=1 << 20)] | None = None
    N: Annotated[int, Field(ge=1, le=1 << 20)]
    epilogue: Epilogue = Epilogue()

    @field_validator("pattern", mode="before")
    @classmethod
    def _kind_default(cls, value: Any) -> Any:
        return {"kind": "n_m", **value} if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _shape(self) -> "Sparse24GemmSpec":
        if self.pattern.path is not None:
            fM, fK = load_dense(self.pattern.path).shape
            if (self.M or fM, self.K or fK) != (fM, fK):
                raise ValueError(f"M and K come from pattern.path ({fM} x {fK}); leave them out or give those values")
        elif self.M is None or self.K is None:
            raise ValueError("M and K are required unless the pattern prunes a dense matrix file")
        if self.M is not None and self.M % ROW_ALIGN:
            raise ValueError(f"M = {self.M} must be a multiple of {ROW_ALIGN} (the 2:4 metadata covers 16-row blocks)")
        if self.K is not None and self.K % K_ALIGN:
            raise ValueError(f"K = {self.K} must be a multiple of {K_ALIGN} (whole sparse tensor-core steps)")
        return self


def spec_shape(spec: Sparse24GemmSpec) -> tuple[int, int, int]:
    """(M, K, N), M and K from the dense file when the pattern prunes one."""
    if spec.pattern.path is not None:
        M, K = load_dense(spec.pattern.path).shape
        return M, K, spec.N
    return spec.M, spec.K, spec.N


def _symbols(spec: Sparse24GemmSpec, M: int, K: int, N: int) -> dict[str, int]:
    """The kernels' symbols of an M x K x N instance of the spec."""
    return {"M": M, "K": K, "N": N, "nnz": M * K // 2, "has_bias": int(spec.epilogue.bias),
            "act": ACTIVATIONS[spec.epilogue.activation]}


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), each operation in that order (the same roundings as the
    expression written out) with two arrays of x's size instead of six (a 16384^2 output is 2 GB a copy)."""
    with np.errstate(over="ignore", invalid="ignore"):
        inner = x**3
        inner *= 0.044715
        inner += x
        inner *= math.sqrt(2.0 / math.pi)
        np.tanh(inner, out=inner)
        inner += 1.0
        out = 0.5 * x
        out *= inner
    return out


def relu_in_place(x: np.ndarray) -> np.ndarray:
    """x with its negative elements set to 0, in place (a 16384^2 output is 2 GB); NaN stays NaN (what
    `x < 0 ? 0 : x` gives on the device)."""
    np.copyto(x, 0.0, where=x < 0)
    return x


def _scaled_product(problem: Problem, magnitudes: bool) -> np.ndarray:
    """alpha * A B + bias in float64, or with every operand's magnitude (|A|, |B|, |bias|)."""
    s = problem.symbols
    A = decompress(problem.inputs["A_values"], problem.inputs["A_meta"], s["M"], s["K"])
    B = to_float64(problem.inputs["B"], problem.dtype)
    bias = (to_float64(problem.inputs["bias"], problem.input_dtypes["bias"]) if "bias" in problem.inputs
            else np.zeros(s["M"]))
    if magnitudes:
        A, B, bias = np.abs(A, out=A), np.abs(B, out=B), np.abs(bias)
    y = float64_product(A, B)  # a new array, scaled and shifted in place
    del A, B
    with np.errstate(invalid="ignore", over="ignore"):
        y *= problem.scalars["alpha"]
        y += bias[:, None]
    return y


class Sparse24Gemm(ProblemFamily):
    name = "sparse24_gemm"
    operation = "spmm"
    format = "2:4"
    spec_model = Sparse24GemmSpec
    kernels_dir = KERNELS_ROOT / "sparse24_gemm"
    preparations = {"epilogue_operands": epilogue_operands}
    # the sparse tensor cores' 2x over dense is the ceiling, and the best library already takes part of it
    # (cuSPARSELt beat dense cuBLAS at 4096^3, 8192^3 and decode on the H200: evals/results/issue15_h200.md)
    target_speedup = 1.25
    flop_rate_factor = 2.0  # dense-equivalent FLOPs on sparse tensor cores: twice the dense rate
    example_spec = {"name": "small_sparse24", "operation": "spmm", "pattern": {"kind": "n_m"},
                    "M": 1024, "K": 1024, "N": 64, "dtype": "fp16", "budget": {"iterations": 4}}
    # element bounds hold for every epilogue but GELU (error_bounds): the product is multilinear, alpha and the
    # bias add two fp32 roundings, ReLU is 1-Lipschitz and exact
    multilinear = True
    # B's NaN and Inf would meet A's structural zeros in a dense reference only: specials go into A's kept values
    special_inputs: ClassVar[tuple[str, ...] | None] = ("A_values",)

    @classmethod
    def claims(cls, data: Mapping[str, Any]) -> bool:
        pattern = data.get("pattern")
        return data.get("operation") == "spmm" and isinstance(pattern, dict) and pattern.get("kind") == "n_m"

    def symbols(self, spec: Sparse24GemmSpec) -> dict[str, int]:
        return _symbols(spec, *spec_shape(spec))

    # -- planning ----------------------------------------------------------------------------------
    def features(self, spec: Sparse24GemmSpec) -> dict[str, float]:
        s = self.symbols(spec)
        return {"M": float(s["M"]), "K": float(s["K"]), "N": float(s["N"]),
                "value_bytes": float(dtype_info(spec.dtype).bytes),
                "flops_per_byte": self.flops(s) / self.min_bytes(s, spec.dtype),
                "skinny": float(s["N"] <= SKINNY_N)}

    def strategies(self, spec: Sparse24GemmSpec, features: Mapping[str, float]) -> list[StrategyStart]:
        """Skinny N (decode): stream A once through per-warp cp.async rings (sp24_stream), the register-streaming
        kernel behind it. Otherwise the tiled sparse tensor-core GEMM; on Hopper, with M and N of at least
        WGMMA_MIN_MN, the warpgroup kernel first (wgmma.sp: the warp-level mma.sp reaches a fraction of its rate; its
        e4m3 sequence for fp8) and mma.sp as the fallback should it be rejected."""
        N = spec.N
        n_tiles = next(t for t in (1, 2, 4, 8) if 8 * t >= min(N, SKINNY_N))
        stream = StrategyStart(
            "sp24_stream", stream_start(n_tiles),
            f"N = {N} is skinny: the compressed A ({features['flops_per_byte']:.0f} flop/byte) is a bandwidth-bound "
            "stream; 16-byte cp.async into per-warp rings of shared memory keep tens of KB in flight per SM, each "
            "warp's B fragments stay in registers, the grid is sized to the SMs with K split into slices of "
            "64 * WARPS * UP columns summed in a fixed order")
        skinny = StrategyStart(
            "sp24_skinny", {"MT": 2, "NT": n_tiles, "WARPS": 8, "UNROLL": 2},
            f"N = {N} is skinny: the compressed A ({features['flops_per_byte']:.0f} flop/byte) is streamed once "
            "straight into mma.sp registers, K split over 8 warps for enough loads in flight")
        tiled = StrategyStart(
            "sp24_mma_sp", {"BM": 128, "BN": 128, "BK": 64, "WM": 2, "WN": 4, "STAGES": 4},
            "128 x 128 tiles, eight warps of 64 x 32, a 4-stage cp.async pipeline feeding mma.sp: the sparse "
            "tensor cores' rate needs the B tile reused across 128 rows (with four warps of 64 x 64 the kernel took "
            "218 registers and ran at 12.5% occupancy on the H200; eight warps hold half the accumulators each)")
        if N <= SKINNY_N:
            return [stream, skinny, tiled]
        if spec.arch in HOPPER and min(features["M"], features["N"]) >= WGMMA_MIN_MN:
            if spec.dtype == "fp8_e4m3":
                wgmma = StrategyStart(
                    "sp24_wgmma_sp_fp8", WGMMA_FP8_START,
                    "e4m3 on wgmma.mma_async.sp: B transposed into a workspace first (8-bit wgmma reads B K-major "
                    "only; K x N bytes more each call, as the dense fp8 baseline does), then persistent blocks over "
                    "128 x 128 tiles, two consumer warpgroups through 4 stages of 256 columns of K, every 2 instructions' "
                    "products added into fp32 accumulators (e4m3 instructions keep fewer bits than fp32); compute-bound at "
                    f"{features['flops_per_byte']:.0f} flop/byte")
            else:
                wgmma = StrategyStart(
                    "sp24_wgmma_sp", WGMMA_START,
                    "256 x 128 tiles on wgmma.mma_async.sp: two consumer warpgroups of 128 x 128 fed by one TMA "
                    "thread (A, its metadata and B) through 3 stages of 128 columns of K; compute-bound at "
                    f"{features['flops_per_byte']:.0f} flop/byte, so the Hopper sparse tensor-core rate is what counts")
            return [wgmma, tiled]
        return [tiled]

    # -- instances ---------------------------------------------------------------------------------
    def make_problem(self, spec: Sparse24GemmSpec, seed: int, shape: Mapping[str, int] | None = None) -> Problem:
        rng = np.random.default_rng(seed)
        M, K, N = spec_shape(spec)
        if shape:
            M, K, N = shape.get("M", M), shape.get("K", K), shape.get("N", N)
        if spec.pattern.path is not None:  # the file's pruned pattern, cut to the shape
            positions = magnitude_positions(np.asarray(load_dense(spec.pattern.path)[:M, :K], dtype=np.float64))
        else:
            positions = random_positions(rng, M, K)
        out = OUTPUT_DTYPE[spec.dtype]
        inputs = {"A_values": to_storage(draw_values(rng, M * K // 2, spec.dtype), spec.dtype).reshape(M, K // 2),
                  "A_meta": pack_meta(positions),
                  "B": to_storage(draw_values(rng, K * N, spec.dtype), spec.dtype).reshape(K, N)}
        input_dtypes = {"A_values": spec.dtype, "A_meta": "int32", "B": spec.dtype}
        if spec.epilogue.bias:
            inputs["bias"] = to_storage(draw_values(rng, M, out), out)
            input_dtypes["bias"] = out
        # rounded to fp32, the type the kernel receives: the kernel and the reference scale by the same number
        alpha = float(np.float32(rng.uniform(0.5, 2.0) * 2.0 ** int(rng.integers(-2, 3)))) if spec.epilogue.alpha else 1.0
        return Problem(
            dtype=spec.dtype,
            symbols=_symbols(spec, M, K, N),
            inputs=inputs,
            input_dtypes=input_dtypes,
            outputs={"C": Output((M, N), out, spec.tolerance or TOLERANCE[out],
                                 aligned_sum_bits=ALIGNED_SUM_BITS.get(spec.dtype))},
            scalars={"alpha": alpha},
        )

    def reference(self, problem: Problem) -> dict[str, np.ndarray]:
        """act(alpha * A B + bias) in float64."""
        y = _scaled_product(problem, magnitudes=False)
        act = problem.symbols["act"]
        return {"C": relu_in_place(y) if act == ACTIVATIONS["relu"] else gelu_tanh(y) if act == ACTIVATIONS["gelu_tanh"] else y}

    def conditions(self, problem: Problem) -> dict[str, np.ndarray]:
        """alpha |A| |B| + |bias| (alpha is drawn positive; ReLU leaves it as it is): the reference on the inputs'
        magnitudes, from the float64 operands instead of a copy of the problem rounded to storage again (8192^3 fp16,
        host part, three runs of three alternated pairs: 1.05-2.87 s against 1.61-4.47 s, faster in 7 of the 9 pairs;
        evals/results/issue15_h200/host_reference_seconds_session12_cpu.txt)."""
        return {"C": _scaled_product(problem, magnitudes=True)}

    def element_terms(self, problem: Problem) -> dict[str, np.ndarray]:
        """K/2 exact products summed in fp32, then the alpha product and the bias sum (two more roundings, as two
        more terms); ReLU moves no error up (1-Lipschitz, evaluated exactly). The same for every element: one value
        that broadcasts to C's shape."""
        return {"C": np.full((1, 1), problem.symbols["K"] // 2 + 2, dtype=np.float64)}

    def error_bounds(self, problem: Problem, refs: Mapping[str, np.ndarray], tolerance: float | None = None,
                     terms: Mapping[str, np.ndarray] | None = None) -> dict[str, ElementBounds] | None:
        """The shared element bounds (alpha is drawn positive, so the reference on |inputs| is the condition, ReLU
        included) for every epilogue but GELU, whose own evaluation error in fp32 has no such bound here:
        norm-wise."""
        if problem.symbols["act"] == ACTIVATIONS["gelu_tanh"]:
            return None
        return super().error_bounds(problem, refs, tolerance, terms)

    def flops(self, symbols: Mapping[str, int]) -> float:
        """Dense-equivalent, as cuSPARSELt and the papers count a 2:4 product."""
        return 2.0 * symbols["M"] * symbols["N"] * symbols["K"]

    def min_bytes(self, symbols: Mapping[str, int], dtype: str) -> float:
        M, K, N = symbols["M"], symbols["K"], symbols["N"]
        value, out = dtype_info(dtype).bytes, dtype_info(OUTPUT_DTYPE[dtype]).bytes
        return M * K / 2 * value + M * K / 8 + K * N * value + M * N * out + symbols.get("has_bias", 0) * M * out

    def tiny_shape(self, spec: Sparse24GemmSpec) -> dict[str, int]:
        return {"M": 64, "K": 128, "N": min(spec.N, 16)}

    def sanitizer_shape(self, spec: Sparse24GemmSpec) -> dict[str, int]:
        """13 row blocks and 5 k-steps (no tile divides them), an odd N: every tail at once."""
        M, K, N = spec_shape(spec)
        return {"M": min(M, 13 * ROW_ALIGN), "K": min(K, 5 * K_ALIGN), "N": min(N, 61 if N > SKINNY_N else max(N - 3, 1))}

    def sanitizer_instances(self, spec: Sparse24GemmSpec, main: Problem, seed: int) -> dict[str, Problem]:
        """The tails, and the spec's own N on the tails' M and K (the aligned-column path of B)."""
        tails = self.sanitizer_shape(spec)
        return {**super().sanitizer_instances(spec, main, seed),
                "spec_columns": self.make_problem(spec, seed + 1, {**tails, "N": spec.N})}

    def held_out_shapes(self, spec: Sparse24GemmSpec, rng: np.random.Generator) -> list[dict[str, int]]:
        """About half the spec's M and K, and a few row blocks and k-steps, on the alignments and never beyond the
        spec's (a pruned file is cut to them); N lowered by a drawn tail (a skinny kernel is built for at most the
        spec's column tiles)."""
        M, K, N = spec_shape(spec)

        def tail_N() -> int:
            return max(N - int(rng.integers(1, 8)), 1)

        def about_half(size: int, align: int, most: int) -> int:
            """Half of `size` plus a drawn number of `align` steps, on the alignment, at most `size`."""
            return min(size, max(align, (size // 2) // align * align + align * int(rng.integers(1, most))))

        return [{"M": about_half(M, ROW_ALIGN, 64), "K": about_half(K, K_ALIGN, 4), "N": tail_N()},
                {"M": ROW_ALIGN * int(rng.integers(1, max(min(M // ROW_ALIGN, 40), 1) + 1)),
                 "K": K_ALIGN * int(rng.integers(1, max(min(K // K_ALIGN, 12), 1) + 1)), "N": tail_N()}]

    # -- artifacts and experience ------------------------------------------------------------------
    def launcher(self, candidate: Any, spec: Sparse24GemmSpec, arch: str) -> str:
        return sparse24_launcher(candidate, spec, arch, OUTPUT_DTYPE[spec.dtype],
                                 ACTIVATIONS[spec.epilogue.activation])

    def experience_key(self, spec: Sparse24GemmSpec) -> dict[str, Any]:
        """A pruned file counts by its contents, not its path."""
        key = super().experience_key(spec)
        if spec.pattern.path is not None:
            key["pattern"] = {**key["pattern"], "path": None,
                              "sha256": hashlib.sha256(Path(spec.pattern.path).read_bytes()).hexdigest()}
        return key

    def experience_distance(self, spec: Sparse24GemmSpec, other: Sparse24GemmSpec) -> float:
        """Shapes apart in log scale (the epilogue is in the experience key)."""
        return sum(abs(math.log(a / b)) for a, b in zip(spec_shape(spec), spec_shape(other)))


FAMILY = Sparse24Gemm()
