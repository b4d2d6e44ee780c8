"""The static source check: device code only; what is refused is named with its line, read the way the compiler
reads the text (splices, comments, raw and adjacent literals, digraphs)."""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.library import prelude, reference_kernels
from sparseditto.tools.compiler import compile_source
from sparseditto.tools.source_check import check_cubin, check_source, lex

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


@pytest.mark.parametrize(("source", "construct", "line"), [
    pytest.param('#define CAT(a, b) a##b\n' + KERNEL % "CAT(__tr, ap)();", "##", 1, id="token_pasting"),
    pytest.param('#define STR(x) #x\n' + KERNEL % "asm volatile(STR(trap;));", "#", 1, id="stringizing"),
    pytest.param('%:define CAT(a, b) a %:%: b\n' + KERNEL % "CAT(__tr, ap)();", "##", 1, id="digraph_pasting"),
    pytest.param(KERNEL % 'const char* s = R"(" // )"; __trap();', "__trap(", 2, id="raw_string_holding_a_comment"),
    pytest.param(KERNEL % 'const char* s = u8R"x(/*)x"; (void)s; __trap(); // */', "__trap(", 2, id="u8_raw_string"),
    pytest.param(KERNEL % 'asm volatile("tr" /* split */ "ap;");', "trap;", 2, id="adjacent_literals"),
    pytest.param(KERNEL % 'asm volatile("tr"\n    "ap;");', "trap;", 2, id="adjacent_literals_over_lines"),
    pytest.param(KERNEL % 'asm volatile("tr\\x61p;");', "trap;", 2, id="hex_escape"),
    pytest.param(KERNEL % 'asm volatile("brkpt;");', "brkpt;", 2, id="brkpt"),
    pytest.param(KERNEL % 'asm volatile("ex" "it;");', "asm volatile(\"exit", 2, id="exit"),
    pytest.param(KERNEL % 'asm volatile("mov.u32 %0, %%clock;" : "=r"(c));', "%clock", 2, id="clock"),
    pytest.param(KERNEL % 'asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));', "%clock64", 2, id="clock64"),
    pytest.param(KERNEL % 'asm volatile("mov.u64 %0, %%global" "timer;" : "=l"(t));', "%globaltimer", 2,
                 id="globaltimer_split"),
    pytest.param(KERNEL % 'asm volatile("nanosleep.u32 100;");', "nanosleep", 2, id="nanosleep"),
    pytest.param(KERNEL % 'asm volatile("mov.u32 %0, %%pm0;" : "=r"(c));', "%pm0", 2, id="performance_counter"),
    pytest.param("// header\n%:include <cstdio>\n" + KERNEL % "y[0] = 1.f;", "#include <cstdio>", 2, id="digraph_include"),
    pytest.param(KERNEL % "y[0] = 1.f;\n    __tr\\\nap();", "__trap(", 3, id="line_splice"),
    pytest.param("/* a\n comment */ " + KERNEL % "y[0] = 1.f; pri\\\nntf(\"%d\", 1);", "printf(", 3,
                 id="line_splice_after_a_comment"),
])
def test_spellings_that_hide_a_construct_are_refused_with_their_line(source, construct, line):
    found = check_source(source)
    assert [(f.evidence["construct"], f.location) for f in found][:1] == [(construct, f"line {line}")]
    assert all(f.error_type == "forbidden_construct" for f in found)


@pytest.mark.parametrize("body", [
    'float a = 1\'000\'000.f; char q = \'"\'; y[0] = a + q; // a digit separator and a quote character',
    'const char* s = "// not a comment", *t = "a##b", *u = R"(#x)"; (void)s; (void)t; (void)u;',
    "if (exit_loop(y)) y[0] = clock_rate;",
    "cute::Tensor<::cute::Int<4>> *t = nullptr; (void)t;",
    "int v<:2:> = <%1, 2%>; y[0] = v<:0:>;",
])
def test_honest_text_passes(body):
    assert check_source("#define MESSAGE \"#x\"\n" + KERNEL % body) == []


def test_the_lexer_keeps_lines_and_joins_literals():
    lexed = lex('a /* one\ntwo */ "x" // c\n "y" R"d(z)d"\n<%b\\\nc%>')
    assert lexed.code == 'a  \n "xyz" \n{bc}'
    assert [lexed.line_at(lexed.code.index(token)) for token in ("a", '"xyz"', "{", "bc")] == [1, 2, 4, 4]
    assert lexed.in_literal(lexed.code.index("xyz")) and not lexed.in_literal(lexed.code.index("bc"))
