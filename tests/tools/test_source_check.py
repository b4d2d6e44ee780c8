"""The static source check: device code only; what is refused is named with its line."""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.library import prelude, reference_kernels
from sparseditto.tools.compiler import compile_source
from sparseditto.tools.source_check import check_cubin, check_source

KERNEL = 'extern "C" __global__ void k(float* y) {\n    %s\n}\n'


@pytest.mark.parametrize("kernel", reference_kernels(), ids=lambda k: k.name)
def test_reference_kernels_pass(kernel):
    assert check_source(prelude() + kernel.body) == []


@pytest.mark.parametrize("line", [
    'printf("%d", 1);', "__trap();", 'asm volatile("exit;");', 'asm("trap;");', "k<<<1, 1>>>(y);", "cudaMemcpy(y, y, 4, cudaMemcpyDefault);",
    "float* p = (float*)malloc(16);", "long long t = clock64();", "cublasSgemm(0);", "__nanosleep(100);",
])
def test_forbidden_constructs_are_refused_with_their_line(line):
    (finding,) = check_source(KERNEL % line)[:1]
    assert finding.stage == "static" and finding.error_type == "forbidden_construct"
    assert finding.location == "line 2"


def test_comments_do_not_count():
    source = KERNEL % '// printf("no"); cudaMalloc\n    /* __trap(); */ y[0] = 1.f;'
    assert check_source(source) == []


def test_includes_and_host_code_are_refused():
    assert check_source("#include <cstdio>\n" + KERNEL % "y[0] = 1.f;")
    assert check_source("__host__ void f() {}\n" + KERNEL % "y[0] = 1.f;")
    assert check_source("int x;")[0].message.startswith("no __global__")


@pytest.mark.parametrize("include", [
    "<cuda_fp16.h>", "<cuda_bf16.h>", "<cuda_fp8.h>", "<mma.h>", "<cuda/barrier>", "<cuda/pipeline>",
    "<cooperative_groups.h>", "<cooperative_groups/reduce.h>", "<cuda.h>", "<cute/tensor.hpp>",
    "<cutlass/numeric_types.h>", '"cute/tensor.hpp"',
])
def test_header_only_device_libraries_may_be_included(include):
    assert check_source(f"#include {include}\n" + KERNEL % "y[0] = 1.f;") == []


@pytest.mark.parametrize("include", [
    "<cstdio>", "<cuda_runtime.h>", "<cuda/std/cstdint>", "<cub/cub.cuh>", "<cute/../../../etc/passwd>",
    "</etc/passwd>", "<cooperative_groups/>", "<cute>", "SOME_MACRO", "<cudax/anything>",
])
def test_any_other_include_is_refused_with_its_line(include):
    finding = check_source("// header\n#  include " + include + "\n" + KERNEL % "y[0] = 1.f;")[0]
    assert finding.error_type == "forbidden_construct" and finding.location == "line 2"
    assert "include" in finding.message


def test_cute_and_cutlass_names_are_not_library_calls_but_vendor_libraries_still_are():
    assert check_source(KERNEL % "cute::half_t h(1.f); y[0] = float(cutlass::half_t(h));") == []
    assert check_source(KERNEL % "cusparseSpMV(0);")


def test_the_compiled_code_is_checked_too():
    """printf, traps, clock reads and sleeps are refused in the SASS, whatever brought them in."""
    source = KERNEL % ('if (y[0] > 1.f) printf("%f", y[0]);\n    if (y[1] > 1.f) __trap();\n'
                       '    y[2] = (float)clock64();\n    __nanosleep(10);')
    result = compile_source(source, "sm_90a", [])
    assert result.ok
    found = check_cubin(result.cubin)
    assert [f.evidence["instruction"].split()[0] for f in found] == ["CALL.ABS.NOINC", "BPT.TRAP", "CS2R", "NANOSLEEP"]
    assert all(f.location == "function k" for f in found)
    clean = compile_source(KERNEL % "y[threadIdx.x] = 2.f * y[threadIdx.x];", "sm_90a", [])
    assert check_cubin(clean.cubin) == []
