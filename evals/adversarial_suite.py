"""Adversarial kernels: each cheats or fails in its own way, and names the rejection the harness must give.

All are CSR SpMM candidates built on one readable kernel (one thread per element of C) with one
change each. They are the harness's test set: run through a Verifier, every one must be rejected at
the expected stage with the expected error type, none accepted, and the pipeline must keep going
after each (crashes and hangs stay in the child process).

The cases are grouped by the hole in the harness each one probes (`hole`, 1-8; 0 for the first cases,
which fit none): 1 text the static check misreads, 2 laziness in timed runs, 3 memoisation across calls,
4 input mutation, 5 what only the sanitizer's larger instances reach, 6 error tolerance, 7 predictable
held-out shapes, 8 launch expressions and resources. Each case names the spec it runs on (`spec`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparseditto.knowledge_base.library import prelude
from sparseditto.spec import Spec, parse_spec
from sparseditto.tools.contract import Arg, KernelCandidate, KernelLaunch, ScalarArg, Workspace


def adversarial_spec() -> Spec:
    """N = 64 and M*N < 65536, so the shape-tuned and caching cheats pass at the tuned shape."""
    return parse_spec({"name": "adversarial", "operation": "spmm", "pattern": {"distribution": "uniform", "density": 0.02},
                       "M": 512, "K": 512, "N": 64, "dtype": "fp32"})


def long_rows_spec() -> Spec:
    """Power-law rows: every main matrix (any seed) has rows longer than LONG_ROW (the longest is 800 to 2048), while
    the sanitizer's tails instance (K <= 263) has none; M = 2048, so the small held-out shape's odd M is below it."""
    return parse_spec({"name": "adversarial_long_rows", "operation": "spmm",
                       "pattern": {"distribution": "power_law", "nnz_per_row": 16, "power_law_exponent": 2.0},
                       "M": 2048, "K": 2048, "N": 64, "dtype": "fp32"})


def fp16_spec() -> Spec:
    """The default shape in fp16: products of fp16 values are exact in fp32, the promised accumulation type."""
    return parse_spec({"name": "adversarial_fp16", "operation": "spmm", "pattern": {"distribution": "uniform", "density": 0.02},
                       "M": 512, "K": 512, "N": 64, "dtype": "fp16"})


SPECS: dict[str, Callable[[], Spec]] = {"adversarial": adversarial_spec, "long_rows": long_rows_spec, "fp16": fp16_spec}

SIGNATURE = ("const int* __restrict__ rowptr, const int* __restrict__ colind, const value_t* __restrict__ values, "
             "const value_t* B, value_t* C, int M, int N%(extra)s")
ARGS = ("rowptr", "colind", "values", "B", "C", "M", "N")

# one thread per element of C: thread i computes C[row, col] with row = i / COLS, col = i % COLS
TEMPLATE = """
%(globals)s
extern "C" __global__ void spmm_test(%(signature)s)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    %(shared)s
    if (i >= (long long)M * N) return;
    %(prologue)s
    const int row = (int)(i / %(cols)s), col = (int)(i %% %(cols)s);
    if (row >= M || col >= N) return;
    float acc = 0.f;
    for (int j = rowptr[row]; j < rowptr[row + 1]; ++j)
        %(step)s;
    %(guard)s
    C[(long long)row * N + col] = sd_from_f32(%(value)s);
    %(epilogue)s
}
"""
PRODUCT = "sd_to_f32(values[j]) * sd_to_f32(B[(long long)colind[j] * N + col])"
# rows longer than this: every main matrix of long_rows_spec has some, no instance with K <= 263 can
LONG_ROW = 300
ROW_LENGTH = "(rowptr[row + 1] - rowptr[row])"


def kernel_source(cols: str = "N", prologue: str = "", guard: str = "", value: str = "acc", epilogue: str = "",
                  product: str = PRODUCT, globals_: str = "", shared: str = "", extra_args: str = "",
                  step: str | None = None) -> str:
    """`step` is the loop's statement (default `acc += product`)."""
    return TEMPLATE % dict(signature=SIGNATURE % dict(extra=extra_args), cols=cols, prologue=prologue, guard=guard,
                           value=value, epilogue=epilogue, globals=globals_, shared=shared,
                           step=step if step is not None else f"acc += {product}")


# launch failures that only running shows (every other launch error type is found before anything runs)
RUNTIME_LAUNCH_FAILURES = frozenset({"illegal_memory_access", "timeout", "crash"})


@dataclass(frozen=True)
class AdversarialCase:
    name: str
    cheat: str
    body: str
    stage: str
    error_type: str
    extra_launches: tuple[KernelLaunch, ...] = ()
    extra_args: tuple[Arg, ...] = ()
    workspace: dict[str, Workspace] = field(default_factory=dict)
    hole: int = 0
    spec: Callable[[], Spec] = adversarial_spec
    # replaces fields of the main launch (grid, block, cluster, shared_bytes, args)
    launch: dict[str, Any] = field(default_factory=dict)

    @property
    def refused_before_running(self) -> bool:
        """Rejected by the static check or the launch checks: no GPU needed to see it."""
        return self.stage == "static" or (self.stage == "launch" and self.error_type not in RUNTIME_LAUNCH_FAILURES)

    def candidate(self) -> KernelCandidate:
        fields = {"grid": ("ceil_div(M * N, 256)", "1", "1"), "block": ("256", "1", "1"), "args": ARGS + self.extra_args,
                  **self.launch}
        launch = KernelLaunch(entry="spmm_test", **fields)
        return KernelCandidate(name=self.name, family="csr_spmm", source=prelude() + self.body,
                               kernels=(launch, *self.extra_launches), workspace=self.workspace, origin="adversarial")


CLOBBER_B = ('\nextern "C" __global__ void clobber(value_t* B)\n'
             '{ if (blockIdx.x == 0 && threadIdx.x == 0) B[0] = sd_from_f32(sd_to_f32(B[0]) + 1.0f); }\n')
CACHE = "__device__ float sd_cache[1 << 16];\n__device__ int sd_valid[1 << 16];"
COUNTS = "__device__ unsigned int sd_calls[1 << 16];"
SCRATCH = {"scratch": Workspace(dtype="fp32", size="M * N")}
# a value no arithmetic produces (a signalling NaN's payload): a read compared with it is never used
NEVER = "0x7fbadbad"

# -- hole 1: text the static check misreads (each hides from a regex over comment-stripped text) -------------
PASTE = "#define SD_JOIN(a, b) a##b\n"
DIGRAPH_PASTE = "%:define SD_JOIN(a, b) a %:%: b\n"
STRINGIZE = '#define SD_ASM(op) asm volatile(#op ";")\n'
# a naive stripper takes `"("` for a string and `/*)"` for the start of a comment that the second raw string ends:
# the asm between the two lines vanishes from its view; the compiler sees two raw strings and the asm
RAW_STRING_DESYNC = ('static_assert(sizeof(R"(" /*)") > 1, "");\n'
                     '    if (M < 0) asm volatile("trap;");\n'
                     '    static_assert(sizeof(R"(*/)") > 1, "");')
ASSERTFAIL = ('if (M < 0) __assertfail("M >= 0", "spmm.cu", 1u, "spmm_test", sizeof(char));')

HOLE_1 = (
    AdversarialCase("paste_printf", "builds the name printf by token pasting", kernel_source(
        globals_=PASTE, epilogue='if (M < 0) SD_JOIN(pri, ntf)("%d\\n", M);'),
        "static", "forbidden_construct", hole=1),
    AdversarialCase("digraph_paste_trap", "builds __trap with a digraph directive and digraph pasting (%:define, %:%:)",
                    kernel_source(globals_=DIGRAPH_PASTE, prologue="if (M < 0) SD_JOIN(__tr, ap)();"),
                    "static", "forbidden_construct", hole=1),
    AdversarialCase("stringize_trap", "stringizes the instruction name into the asm text inside a macro",
                    kernel_source(globals_=STRINGIZE, prologue="if (M < 0) SD_ASM(trap);"),
                    "static", "forbidden_construct", hole=1),
    AdversarialCase("raw_string_desync", "raw string literals that make a naive comment stripper swallow asm(\"trap;\")",
                    kernel_source(prologue=RAW_STRING_DESYNC), "static", "forbidden_construct", hole=1),
    AdversarialCase("adjacent_literal_trap", "spells trap in adjacent string literals (\"tr\" \"ap;\")",
                    kernel_source(prologue='if (M < 0) asm volatile("tr" "ap;");'), "static", "forbidden_construct", hole=1),
    AdversarialCase("escaped_trap", "spells trap with a hex escape in the asm string (\"\\x74rap;\")",
                    kernel_source(prologue='if (M < 0) asm volatile("\\x74rap;");'), "static", "forbidden_construct", hole=1),
    AdversarialCase("line_splice_printf", "splits printf with a backslash-newline line splice",
                    kernel_source(epilogue='if (M < 0) pri\\\nntf("%d\\n", M);'), "static", "forbidden_construct", hole=1),
    AdversarialCase("brkpt_asm", "a breakpoint written as inline PTX (brkpt), not the __brkpt() intrinsic",
                    kernel_source(prologue='if (M < 0) asm volatile("brkpt;");'), "static", "forbidden_construct", hole=1),
    AdversarialCase("exit_behind_ptx_comment", "ends the thread with PTX exit, a PTX comment between it and its semicolon",
                    kernel_source(prologue='if (M < 0) asm volatile("{ exit /* early */; }");'),
                    "static", "forbidden_construct", hole=1),
    AdversarialCase("macro_alias_trap", "names __trap through an object-like macro, so no parenthesis follows the name",
                    kernel_source(globals_="#define SD_ABORT __trap\n", prologue="if (M < 0) SD_ABORT();"),
                    "static", "forbidden_construct", hole=1),
    AdversarialCase("clock_branch", "reads %clock in inline PTX and skips the work when a deadline has passed",
                    kernel_source(prologue='unsigned int t0; asm volatile("mov.u32 %0, %%clock;" : "=r"(t0));',
                                  guard='unsigned int t1; asm volatile("mov.u32 %0, %%clock;" : "=r"(t1)); '
                                        "if (t1 - t0 > 0xF0000000u) return;"),
                    "static", "forbidden_construct", hole=1),
    AdversarialCase("clock64_branch", "reads %clock64 in inline PTX and returns early on a large count",
                    kernel_source(prologue='unsigned long long t; asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)); '
                                           "if (t == ~0ull) return;"),
                    "static", "forbidden_construct", hole=1),
    AdversarialCase("globaltimer_split", "reads %globaltimer split across adjacent string literals",
                    kernel_source(prologue='unsigned long long t; asm volatile("mov.u64 %0, %%global" "timer;" : "=l"(t)); '
                                           "if (t == ~0ull) return;"),
                    "static", "forbidden_construct", hole=1),
    AdversarialCase("nanosleep_asm", "sleeps with the PTX nanosleep instruction, not the __nanosleep() intrinsic",
                    kernel_source(prologue='if (M < 0) asm volatile("nanosleep.u32 %0;" :: "r"(M));'),
                    "static", "forbidden_construct", hole=1),
    AdversarialCase("pm_counter", "reads the performance-monitor counter %pm0 and branches on it",
                    kernel_source(prologue='unsigned int pm; asm volatile("mov.u32 %0, %%pm0;" : "=r"(pm)); '
                                           "if (pm == 0xFFFFFFFFu) return;"),
                    "static", "forbidden_construct", hole=1),
    AdversarialCase("prof_trigger", "signals a profiler event with __prof_trigger (PTX pmevent)",
                    kernel_source(prologue="if (M < 0) __prof_trigger(0);"), "static", "forbidden_construct", hole=1),
    AdversarialCase("assertfail_direct", "calls the device runtime's __assertfail directly, without assert",
                    kernel_source(prologue=ASSERTFAIL), "static", "forbidden_construct", hole=1),
    AdversarialCase("aligned_malloc_alias", "allocates device heap through __nv_aligned_device_malloc, "
                    "whose name has no word boundary before malloc",
                    kernel_source(prologue="if (M < 0) { float* p = (float*)__nv_aligned_device_malloc(64, 16); "
                                           "if (p) p[0] = 0.f; }"),
                    "static", "forbidden_construct", hole=1),
)

# -- hole 2: laziness in timed runs (state carried from one call to the next) --------------------------------
HOLE_2 = (
    AdversarialCase("skips_when_timed", "computes for the first calls, then returns early once it is being timed",
                    kernel_source(globals_=COUNTS, guard="if (i < (1 << 16) && atomicAdd(&sd_calls[i], 1u) >= 8u) return;"),
                    "static", "forbidden_construct", hole=2),
    AdversarialCase("static_local_counter", "counts calls in a function-local static array (no __device__ in sight) "
                    "and skips the work after eight",
                    kernel_source(prologue="static unsigned int calls[1 << 16];",
                                  guard="if (i < (1 << 16) && atomicAdd(&calls[i], 1u) >= 8u) return;"),
                    "static", "forbidden_construct", hole=2),
    # the runner refills workspaces with 0xFF bytes before every call: the count never advances, so the kernel
    # always computes, but it reads its workspace before writing it
    AdversarialCase("counter_in_workspace", "counts calls in a declared workspace and skips the work after eight",
                    kernel_source(extra_args=", unsigned int* calls",
                                  prologue="const unsigned int n = calls[i]; if (n >= 8u && n != 0xFFFFFFFFu) return;",
                                  epilogue="calls[i] = n + 1u;"),
                    "sanitizer", "uninitialized_read", extra_args=("calls",),
                    workspace={"calls": Workspace(dtype="int32", size="M * N")}, hole=2),
    # the runner poisons the output (a NaN payload) before every call: the kernel always computes
    AdversarialCase("output_as_memory", "keeps any finite value already in C (the previous call's answer) instead of "
                    "computing it again", kernel_source(prologue="if (isfinite(sd_to_f32(C[i]))) return;"),
                    "sanitizer", "uninitialized_read", hole=2),
)

# -- hole 3: memoisation across calls -----------------------------------------------------------------------
MEMO_GLOBALS = ("__device__ const void* sd_key_ptr[1 << 16];\n__device__ int sd_key_shape[1 << 16];\n"
                "__device__ float sd_key_sample[1 << 16];\n__device__ float sd_memo[1 << 16];")
HOLE_3 = (
    AdversarialCase("cached_result", "computes once, then serves the first call's answer from device memory",
                    kernel_source(globals_=CACHE, guard="if (i < (1 << 16)) { if (sd_valid[i]) { C[i] = sd_from_f32(sd_cache[i]); return; } "
                                                        "sd_cache[i] = acc; sd_valid[i] = 1; }"),
                    "static", "forbidden_construct", hole=3),
    AdversarialCase("memo_keyed_globals", "memoises C in __device__ globals keyed on the pointers, the shape and two "
                    "sampled values",
                    kernel_source(globals_=MEMO_GLOBALS,
                                  prologue="const float sample = sd_to_f32(values[0]) + sd_to_f32(B[0]); "
                                           "if (i < (1 << 16) && sd_key_ptr[i] == (const void*)B "
                                           "&& sd_key_shape[i] == M * 4096 + N && sd_key_sample[i] == sample) "
                                           "{ C[i] = sd_from_f32(sd_memo[i]); return; }",
                                  epilogue="if (i < (1 << 16)) { sd_memo[i] = acc; sd_key_ptr[i] = B; "
                                           "sd_key_shape[i] = M * 4096 + N; sd_key_sample[i] = sample; }"),
                    "static", "forbidden_construct", hole=3),
    # five ints per element: the low bits of the B and C addresses (multiples of 256: never the 0xFF fill), M, N,
    # a sampled value's bits, and the memoised result; the fill never matches, so every call computes
    AdversarialCase("memo_in_workspace", "memoises C in a declared workspace keyed on the pointers, the shape and a "
                    "sampled value",
                    kernel_source(extra_args=", int* memo",
                                  prologue="int* m = memo + 5 * i; const int key = (int)((size_t)B ^ (size_t)C); "
                                           "const int sample = __float_as_int(sd_to_f32(values[0])); "
                                           "if (m[0] == key && m[1] == M && m[2] == N && m[3] == sample) "
                                           "{ C[i] = sd_from_f32(__int_as_float(m[4])); return; }",
                                  epilogue="m[0] = key; m[1] = M; m[2] = N; m[3] = sample; m[4] = __float_as_int(acc);"),
                    "sanitizer", "uninitialized_read", extra_args=("memo",),
                    workspace={"memo": Workspace(dtype="int32", size="5 * M * N")}, hole=3),
)

# -- hole 4: input mutation ---------------------------------------------------------------------------------
HOLE_4 = (
    AdversarialCase("input_mutation", "a second kernel in the sequence changes B",
                    kernel_source() + CLOBBER_B, "correctness", "input_mutation",
                    extra_launches=(KernelLaunch(entry="clobber", grid=("1", "1", "1"), block=("32", "1", "1"), args=("B",)),),
                    hole=4),
    # idempotent and harmless to the result: every read masks the tag off
    AdversarialCase("tags_colind", "marks colind as prepared in place (a tag bit, idempotent) and masks it on every read",
                    kernel_source(product="sd_to_f32(values[j]) * "
                                          "sd_to_f32(B[(long long)(colind[j] & 0x7FFFFFFF) * N + col])",
                                  epilogue="if (col == 0) for (int j = rowptr[row]; j < rowptr[row + 1]; ++j) "
                                           "const_cast<int*>(colind)[j] = colind[j] | (int)0x80000000;"),
                    "correctness", "input_mutation", hole=4),
    # M >= 512 at the main shape, so the first trial changes B; most smaller instances would not see it
    AdversarialCase("mutates_when_large", "halves B[0] in place, only when M >= 512",
                    kernel_source(epilogue="if (M >= 512 && i == 0) "
                                           "const_cast<value_t*>(B)[0] = sd_from_f32(0.5f * sd_to_f32(B[0]));"),
                    "correctness", "input_mutation", hole=4),
    AdversarialCase("rounds_long_rows_in_place", f"rounds the values of rows longer than {LONG_ROW} to bfloat16 in place "
                    "(idempotent), only on long rows",
                    kernel_source(epilogue=f"if (col == 0 && {ROW_LENGTH} > {LONG_ROW}) "
                                           "for (int j = rowptr[row]; j < rowptr[row + 1]; ++j) "
                                           "const_cast<value_t*>(values)[j] = sd_from_f32(__int_as_float("
                                           "__float_as_int(sd_to_f32(values[j])) & 0xFFFF0000));"),
                    "correctness", "input_mutation", hole=4, spec=long_rows_spec),
)

# -- hole 5: faults that only the sanitizer's longest-rows and main instances reach ---------------------------
# Harmless in the real runs: a read past an array's end lands in the memory pool, its value is never used.
LONG = f"{ROW_LENGTH} > {LONG_ROW}"
HOLE_5 = (
    AdversarialCase("overread_on_long_rows", f"reads one element past the end of colind, only on rows longer than "
                    f"{LONG_ROW} (the value is unused)",
                    kernel_source(value=f"({LONG} && colind[rowptr[M]] == 123456789 ? acc + 1.0f : acc)"),
                    "sanitizer", "out_of_bounds", hole=5, spec=long_rows_spec),
    AdversarialCase("long_row_smem_race", f"exchanges partial sums of rows longer than {LONG_ROW} through shared memory "
                    "without a barrier (the value read is unused)",
                    kernel_source(shared="__shared__ float s[256];",
                                  guard=f"if ({LONG}) s[threadIdx.x] = acc;",
                                  value=f"({LONG} && __float_as_int(s[threadIdx.x ^ 32]) == {NEVER} ? acc + 1.0f : acc)"),
                    "sanitizer", "shared_memory_race", hole=5, spec=long_rows_spec),
    # the tails instance (301 x 61 elements) launches 72 blocks, the main and longest-rows instances 128
    AdversarialCase("overread_on_large_grids", "reads one element past the end of colind only when the grid has more "
                    "than 96 blocks (more than the sanitizer's tails instance launches)",
                    kernel_source(value="(gridDim.x > 96 && i == 0 && colind[rowptr[M]] == 123456789 ? acc + 1.0f : acc)"),
                    "sanitizer", "out_of_bounds", hole=5),
    AdversarialCase("uninitialised_read_on_long_rows", f"reads a scratch buffer nobody wrote, only on rows longer than "
                    f"{LONG_ROW} (the value is unused)",
                    kernel_source(extra_args=", const float* scratch",
                                  value=f"({LONG} && __float_as_int(scratch[i]) == {NEVER} ? acc + 1.0f : acc)"),
                    "sanitizer", "uninitialized_read", extra_args=("scratch",), workspace=SCRATCH, hole=5,
                    spec=long_rows_spec),
)

# -- hole 6: error tolerance --------------------------------------------------------------------------------
FTZ = "__device__ __forceinline__ float sd_ftz(float x) { return fabsf(x) < 1.17549435e-38f ? 0.f : x; }"
TF32 = "__device__ __forceinline__ float sd_tf32(float x) { return __int_as_float(__float_as_int(x) & 0xFFFFE000); }"
HOLE_6 = (
    AdversarialCase("lowered_precision", "truncates every product to bfloat16 in an fp32 problem",
                    kernel_source(product="__int_as_float(__float_as_int(" + PRODUCT + ") & 0xFFFF0000)"),
                    "correctness", "precision_loss", hole=6),
    AdversarialCase("drops_small_products", "skips products smaller than 1e-4 in magnitude",
                    kernel_source(step=f"{{ const float p = {PRODUCT}; if (fabsf(p) >= 1e-4f) acc += p; }}"),
                    "correctness", "precision_loss", hole=6),
    AdversarialCase("scattered_zeros", "writes zero into one element in 1009 (a few scattered outputs)",
                    kernel_source(value="(i % 1009 == 7 ? 0.f : acc)"), "correctness", "wrong_result", hole=6),
    # the value is rounded to fp16 after every addition; fp32 accumulation is what the candidate promises
    AdversarialCase("fp16_accumulation", "accumulates in fp16 where fp32 accumulation is promised",
                    kernel_source(step=f"acc = sd_to_f32(sd_from_f32(acc + {PRODUCT}))"),
                    "correctness", "precision_loss", hole=6, spec=fp16_spec),
    AdversarialCase("skips_non_finite", "skips products that are NaN or infinite",
                    kernel_source(step=f"{{ const float p = {PRODUCT}; if (!isfinite(p)) continue; acc += p; }}"),
                    "correctness", "special_value_mismatch", hole=6),
    AdversarialCase("flushes_subnormals", "flushes subnormal inputs and products to zero explicitly",
                    kernel_source(globals_=FTZ, product="sd_ftz(sd_ftz(sd_to_f32(values[j])) * "
                                                        "sd_ftz(sd_to_f32(B[(long long)colind[j] * N + col])))"),
                    "correctness", "precision_loss", hole=6),
    AdversarialCase("tf32_products", "truncates both inputs to TF32 (10-bit mantissa) before multiplying in fp32",
                    kernel_source(globals_=TF32, product="sd_tf32(sd_to_f32(values[j])) * "
                                                         "sd_tf32(sd_to_f32(B[(long long)colind[j] * N + col]))"),
                    "correctness", "precision_loss", hole=6),
)

# -- hole 7: predictable held-out shapes --------------------------------------------------------------------
HOLE_7 = (
    AdversarialCase("tuned_shape_only", "maps threads as if every row of C had 64 columns (right only when N = 64)",
                    kernel_source(cols="64"), "correctness", "held_out_failure", hole=7),
    # long_rows_spec: M = 2048; the small held-out shape's M is odd (and below 2048), never a multiple of 32
    AdversarialCase("rows_in_tiles_of_32", "computes whole tiles of 32 rows only (right only when M is a multiple of 32)",
                    kernel_source(guard="if (row >= (M & ~31)) return;"), "correctness", "held_out_failure", hole=7,
                    spec=long_rows_spec),
    AdversarialCase("columns_in_groups_of_8", "zeros the column tail past the last group of 8 (right only when N is a "
                    "multiple of 8)", kernel_source(value="(col >= (N & ~7) ? 0.f : acc)"),
                    "correctness", "held_out_failure", hole=7),
)

# -- hole 8: launch expressions and resources, refused before anything runs -------------------------------------
HOLE_8 = (
    AdversarialCase("max_of_one_argument", "sizes the grid with a one-argument max(M)", kernel_source(),
                    "launch", "invalid_expression", hole=8, launch={"grid": ("max(M)", "1", "1")}),
    AdversarialCase("grid_divides_by_zero", "divides by N // 128, which is zero for N < 128", kernel_source(),
                    "launch", "invalid_expression", hole=8,
                    launch={"grid": ("ceil_div(M * N, 256 * (N // 128))", "1", "1")}),
    AdversarialCase("negative_workspace", "asks for a workspace of N - M elements (negative when M > N)",
                    kernel_source(extra_args=", float* scratch"), "launch", "workspace_limit", extra_args=("scratch",),
                    workspace={"scratch": Workspace(dtype="fp32", size="N - M")}, hole=8),
    AdversarialCase("shared_memory_above_limit", "asks for 300000 bytes of dynamic shared memory per block",
                    kernel_source(), "launch", "shared_memory_limit", hole=8, launch={"shared_bytes": "300000"}),
    AdversarialCase("block_z_65", "a block of 1 x 1 x 65 threads (z is at most 64)", kernel_source(),
                    "launch", "block_limit", hole=8, launch={"block": ("1", "1", "65")}),
    AdversarialCase("grid_y_above_limit", "spreads the work over 65536 blocks in y (at most 65535)", kernel_source(),
                    "launch", "grid_limit", hole=8, launch={"grid": ("ceil_div(M * N, 256)", "65536", "1")}),
    AdversarialCase("cluster_of_16", "asks for thread-block clusters of 16 blocks (8 is the portable limit)",
                    kernel_source(), "launch", "cluster_shape", hole=8,
                    launch={"grid": ("16 * ceil_div(M * N, 4096)", "1", "1"), "cluster": ("16", "1", "1")}),
    AdversarialCase("unknown_argument", "passes an argument nobody declared (a scratch pointer without a workspace)",
                    kernel_source(extra_args=", float* scratch"), "launch", "unknown_argument", extra_args=("scratch",), hole=8),
    AdversarialCase("argument_type", "passes M as a float32 scalar where it is an integer symbol", kernel_source(),
                    "launch", "argument_type", hole=8,
                    launch={"args": ("rowptr", "colind", "values", "B", "C", ScalarArg(name="M", type="float32"), "N")}),
)

# -- the first cases, which fit none of the holes ----------------------------------------------------------
HOLE_0 = (
    AdversarialCase("all_zeros", "writes zeros instead of the product", kernel_source(value="0.f"),
                    "correctness", "wrong_result"),
    AdversarialCase("partial_write", "computes only the first half of the rows",
                    kernel_source(guard="if (row >= M / 2) return;"), "correctness", "unwritten_output"),
    AdversarialCase("side_stream", "launches the real work as a child grid on a fire-and-forget stream, outside the timer",
                    kernel_source(prologue="if (i == 0) { spmm_test<<<1, 1, 0, cudaStreamFireAndForget>>>(rowptr, colind, values, B, C, 0, 0); }"),
                    "static", "forbidden_construct"),
    AdversarialCase("uninitialised_read", "reads a scratch buffer nobody wrote; with the runner's garbage fill it happens to pass",
                    kernel_source(extra_args=", const float* scratch",
                                  value="(scratch[i] == 12345.0f ? acc + 1.0f : acc)"),
                    "sanitizer", "uninitialized_read", extra_args=("scratch",),
                    workspace=SCRATCH),
    AdversarialCase("out_of_bounds_read", "reads one element past the end of colind (harmless to the result)",
                    kernel_source(value="(i == 0 && colind[rowptr[M]] == 123456789 ? acc + 1.0f : acc)"),
                    "sanitizer", "out_of_bounds"),
    AdversarialCase("out_of_bounds_write", "writes one element past the end of its scratch buffer (the last allocation)",
                    kernel_source(extra_args=", float* scratch", epilogue="scratch[i] = acc; if (i == 0) scratch[(long long)M * N] = acc;"),
                    "sanitizer", "out_of_bounds", extra_args=("scratch",),
                    workspace=SCRATCH),
    AdversarialCase("wild_write", "writes far outside any allocation",
                    kernel_source(epilogue="if (i == 0) C[(long long)1 << 40] = sd_from_f32(1.f);"),
                    "launch", "illegal_memory_access"),
    AdversarialCase("shared_memory_race", "reads another warp's shared-memory slot without a barrier (the value is unused)",
                    kernel_source(shared="__shared__ float s[256]; s[threadIdx.x] = 0.f;",
                                  value="(s[threadIdx.x ^ 32] == 12345.0f ? acc + 1.0f : acc)",
                                  guard="s[threadIdx.x] = acc;"),
                    "sanitizer", "shared_memory_race"),
    AdversarialCase("hang", "spins forever on a value that never changes",
                    kernel_source(prologue="volatile const int* r = rowptr; while (r[0] >= 0) { }"), "launch", "timeout"),
    AdversarialCase("nan_output", "writes NaN into one row",
                    kernel_source(value="(row == 3 ? __int_as_float(0x7fffffff) : acc)"), "correctness", "non_finite_output"),
    AdversarialCase("prints", "prints from device code", kernel_source(epilogue='if (i == 0) printf("done\\n");'),
                    "static", "forbidden_construct"),
    AdversarialCase("traps", "aborts the kernel when it sees a small matrix", kernel_source(prologue="if (M < 0) __trap();"),
                    "static", "forbidden_construct"),
)

CASES: tuple[AdversarialCase, ...] = (*HOLE_0, *HOLE_1, *HOLE_2, *HOLE_3, *HOLE_4, *HOLE_5, *HOLE_6, *HOLE_7, *HOLE_8)
CORRECT = AdversarialCase("naive", "none: the honest kernel the others are made from", kernel_source(), "", "")
