"""Adversarial kernels: each cheats or fails in its own way, and names the rejection the harness must give.

All are CSR SpMM candidates built on one readable kernel (one thread per element of C) with one
change each. They are the harness's test set: run through a Verifier, every one must be rejected at
the expected stage with the expected error type, none accepted, and the pipeline must keep going
after each (crashes and hangs stay in the child process).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparseditto.knowledge_base.library import prelude
from sparseditto.spec import Spec, parse_spec
from sparseditto.tools.contract import KernelCandidate, KernelLaunch, Workspace

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
        acc += %(product)s;
    %(guard)s
    C[(long long)row * N + col] = sd_from_f32(%(value)s);
    %(epilogue)s
}
"""
PRODUCT = "sd_to_f32(values[j]) * sd_to_f32(B[(long long)colind[j] * N + col])"


def kernel_source(cols: str = "N", prologue: str = "", guard: str = "", value: str = "acc", epilogue: str = "",
                  product: str = PRODUCT, globals_: str = "", shared: str = "", extra_args: str = "") -> str:
    return TEMPLATE % dict(signature=SIGNATURE % dict(extra=extra_args), cols=cols, prologue=prologue, guard=guard,
                           value=value, epilogue=epilogue, product=product, globals=globals_, shared=shared)


@dataclass(frozen=True)
class AdversarialCase:
    name: str
    cheat: str
    body: str
    stage: str
    error_type: str
    extra_launches: tuple[KernelLaunch, ...] = ()
    extra_args: tuple[str, ...] = ()
    workspace: dict[str, Workspace] = field(default_factory=dict)

    def candidate(self) -> KernelCandidate:
        launch = KernelLaunch(entry="spmm_test", grid=("ceil_div(M * N, 256)", "1", "1"), block=("256", "1", "1"),
                              args=ARGS + self.extra_args)
        return KernelCandidate(name=self.name, family="csr_spmm", source=prelude() + self.body,
                               kernels=(launch, *self.extra_launches), workspace=self.workspace, origin="adversarial")


CLOBBER_B = ('\nextern "C" __global__ void clobber(value_t* B)\n'
             '{ if (blockIdx.x == 0 && threadIdx.x == 0) B[0] = sd_from_f32(sd_to_f32(B[0]) + 1.0f); }\n')
CACHE = "__device__ float sd_cache[1 << 16];\n__device__ int sd_valid[1 << 16];"
COUNTS = "__device__ unsigned int sd_calls[1 << 16];"
SCRATCH = {"scratch": Workspace(dtype="fp32", size="M * N")}

CASES: tuple[AdversarialCase, ...] = (
    AdversarialCase("all_zeros", "writes zeros instead of the product", kernel_source(value="0.f"),
                    "correctness", "wrong_result"),
    AdversarialCase("partial_write", "computes only the first half of the rows",
                    kernel_source(guard="if (row >= M / 2) return;"), "correctness", "unwritten_output"),
    AdversarialCase("tuned_shape_only", "maps threads as if every row of C had 64 columns (right only when N = 64)",
                    kernel_source(cols="64"), "correctness", "held_out_failure"),
    AdversarialCase("cached_result", "computes once, then serves the first call's answer from device memory",
                    kernel_source(globals_=CACHE, guard="if (i < (1 << 16)) { if (sd_valid[i]) { C[i] = sd_from_f32(sd_cache[i]); return; } "
                                                        "sd_cache[i] = acc; sd_valid[i] = 1; }"),
                    "correctness", "stale_result"),
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
    AdversarialCase("input_mutation", "a second kernel in the sequence changes B",
                    kernel_source() + CLOBBER_B, "correctness", "input_mutation",
                    extra_launches=(KernelLaunch(entry="clobber", grid=("1", "1", "1"), block=("32", "1", "1"), args=("B",)),)),
    AdversarialCase("lowered_precision", "truncates every product to bfloat16 in an fp32 problem",
                    kernel_source(product="__int_as_float(__float_as_int(" + PRODUCT + ") & 0xFFFF0000)"),
                    "correctness", "precision_loss"),
    AdversarialCase("skips_when_timed", "computes for the first calls, then returns early once it is being timed",
                    kernel_source(globals_=COUNTS, guard="if (i < (1 << 16) && atomicAdd(&sd_calls[i], 1u) >= 8u) return;"),
                    "benchmark", "inconsistent_output"),
    AdversarialCase("prints", "prints from device code", kernel_source(epilogue='if (i == 0) printf("done\\n");'),
                    "static", "forbidden_construct"),
    AdversarialCase("traps", "aborts the kernel when it sees a small matrix", kernel_source(prologue="if (M < 0) __trap();"),
                    "static", "forbidden_construct"),
)
CORRECT = AdversarialCase("naive", "none: the honest kernel the others are made from", kernel_source(), "", "")


def adversarial_spec() -> Spec:
    """N = 64 and M*N < 65536, so the shape-tuned and caching cheats pass at the tuned shape."""
    return parse_spec({"name": "adversarial", "operation": "spmm", "pattern": {"distribution": "uniform", "density": 0.02},
                       "M": 512, "K": 512, "N": 64, "dtype": "fp32"})
