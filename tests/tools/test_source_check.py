"""The static source check: device code only; what is refused is named with its line."""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.library import prelude, reference_kernels
from sparseditto.tools.source_check import check_source

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
