"""The kernel contract judged on what the compiler produced (PTX and SASS): every spelling that got a trap,
printf, timer read, sleep or device-memory state past a text check is refused there, and honest look-alikes
pass. Each kernel is compiled with NVRTC (no GPU needed)."""

from __future__ import annotations

import pytest

from sparseditto.tools import source_check
from sparseditto.tools.compiler import CompileResult, compile_source
from sparseditto.tools.ptx_check import check_ptx
from sparseditto.tools.sass import find_disassembler
from sparseditto.tools.source_check import check_compiled, check_source

KERNEL = 'extern "C" __global__ void k(float* y, int i)\n{\n%s\n}\n'
needs_nvdisasm = pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not installed")


def compiled(source: str, options: tuple[str, ...] = ()) -> CompileResult:
    result = compile_source(source, "sm_90a", list(options))
    assert result.ok, result.log[-2000:]
    assert result.ptx and ".entry k" in result.ptx
    return result


def ptx_constructs(source: str) -> set[str]:
    """The constructs the PTX check refuses in the compiled source."""
    return {f.evidence["construct"] for f in check_ptx(compiled(source).ptx)}


# The held-out attacks: spellings the old regex over the text let through. The text filter now refuses each
# (tests/tools/test_source_check.py checks the line); here, the compiled code is refused as well.
SPELLINGS = [
    pytest.param('#define CAT(a, b) a##b\n' + KERNEL % "if (i < 0) CAT(__tr, ap)();", "trap", id="token_pasting"),
    pytest.param('#define STR(x) #x\n' + KERNEL % "if (i < 0) asm volatile(STR(trap;));", "trap", id="stringizing"),
    pytest.param(KERNEL % 'const char* s = R"(" // )"; (void)s;\nif (i < 0) __trap();', "trap", id="raw_string"),
    pytest.param(KERNEL % 'if (i < 0) asm volatile("tr" "ap;");', "trap", id="adjacent_literals"),
    pytest.param(KERNEL % 'if (i < 0) asm volatile("brkpt;");', "brkpt", id="brkpt"),
    pytest.param(KERNEL % 'if (i < 0) asm volatile("ex" "it;");', "exit", id="exit"),
    pytest.param(KERNEL % 'unsigned c; asm volatile("mov.u32 %0, %%clock;" : "=r"(c)); y[0] = c;', "%clock",
                 id="clock"),
    pytest.param(KERNEL % 'unsigned long long c; asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)); y[0] = c;',
                 "%clock64", id="clock64"),
    pytest.param(KERNEL % 'unsigned long long t; asm volatile("mov.u64 %0, %%global" "timer;" : "=l"(t)); y[0] = t;',
                 "%globaltimer", id="globaltimer_split"),
    pytest.param(KERNEL % 'asm volatile("nanosleep.u32 100;");', "nanosleep", id="nanosleep"),
    pytest.param('%:define CAT(a, b) a %:%: b\n' + KERNEL % "if (i < 0) <% CAT(__tr, ap)(); %> y<:0:> = 1.f;", "trap",
                 id="digraphs"),
    pytest.param(KERNEL % 'if (i < 0) __tr\\\nap();\nif (i < -1) prin\\\ntf("%d", i);', "vprintf", id="line_splices"),
]


@pytest.mark.parametrize(("source", "construct"), SPELLINGS)
def test_each_held_out_spelling_is_refused_by_the_text_filter_and_in_the_ptx(source, construct):
    assert check_source(source), "the text filter let it through"
    assert construct in ptx_constructs(source)


# What macros hide from the text filter: a string split between a macro and the asm statement, a name behind a
# macro, a header function, a plain variable. Only the compiled code shows them.
HIDDEN_ASM = '#define PART "%s"\n' + KERNEL
HIDDEN = [
    pytest.param(HIDDEN_ASM % ("tr", 'if (i < 0) asm volatile(PART "ap;");'), "trap", id="trap"),
    pytest.param(HIDDEN_ASM % ("brk", 'if (i < 0) asm volatile(PART "pt;");'), "brkpt", id="brkpt"),
    pytest.param(HIDDEN_ASM % ("ex", 'if (i < 0) asm volatile(PART "it;");'), "exit", id="exit"),
    pytest.param(HIDDEN_ASM % ("mov.u32 %0, %%cl", 'unsigned c; asm volatile(PART "ock;" : "=r"(c)); y[0] = c;'),
                 "%clock", id="clock"),
    pytest.param(HIDDEN_ASM % ("mov.u64 %0, %%cl", 'unsigned long long c; asm volatile(PART "ock64;" : "=l"(c)); y[0] = c;'),
                 "%clock64", id="clock64"),
    pytest.param(HIDDEN_ASM % ("mov.u32 %0, %%glo", 'unsigned t; asm volatile(PART "baltimer_lo;" : "=r"(t)); y[0] = t;'),
                 "%globaltimer_lo", id="globaltimer_lo"),
    pytest.param(HIDDEN_ASM % ("nano", 'asm volatile(PART "sleep.u32 100;");'), "nanosleep", id="nanosleep"),
    pytest.param(HIDDEN_ASM % ("mov.u32 %0, %%p", 'unsigned c; asm volatile(PART "m3;" : "=r"(c)); y[0] = c;'),
                 "%pm3", id="pm3"),
    pytest.param(HIDDEN_ASM % ("pme", 'asm volatile(PART "vent 1;");'), "pmevent", id="pmevent"),
    pytest.param("#define SAY printf\n" + KERNEL % 'if (i < 0) SAY ("%d", i);', "vprintf", id="printf"),
    pytest.param("#define GET malloc\n" + KERNEL % "float* p = (float*)GET (16); p[0] = 1.f; y[0] = p[i];", "malloc",
                 id="malloc"),
    pytest.param(KERNEL % "assert(i >= 0);", "__assertfail", id="assert"),
    pytest.param("__device__ unsigned int counter;\n" + KERNEL % "if (atomicAdd(&counter, 1u) > 8u) return; y[0] = 1.f;",
                 "counter", id="device_counter"),
    pytest.param("__device__ float memo[64];\n" + KERNEL % "if (memo[i & 63] != 0.f) { y[0] = memo[i & 63]; return; }\n"
                 "memo[i & 63] = 2.f * y[0];", "memo", id="memo_table"),
    pytest.param(KERNEL % "static __device__ int calls; y[0] = (float)calls++;", "_ZZ1kE5calls", id="function_static"),
    pytest.param("__device__ int counter;\n__device__ int* alias = &counter;\n" + KERNEL % "y[0] = (float)atomicAdd(alias, 1);",
                 "counter", id="address_in_initializer"),
]


@pytest.mark.parametrize(("source", "construct"), HIDDEN)
def test_what_the_text_filter_cannot_see_is_refused_in_the_ptx(source, construct):
    assert check_source(source) == []
    found = check_ptx(compiled(source).ptx)
    refusal = next(f for f in found if f.evidence["construct"] == construct)
    assert (refusal.stage, refusal.status, refusal.error_type) == ("static", "failed", "forbidden_construct")
    assert refusal.evidence["layer"] == "ptx" and refusal.location.startswith("PTX line ")


def test_a_call_to_any_function_outside_the_module_is_refused_at_the_call():
    source = 'extern "C" __device__ int helper_elsewhere(int);\n' + KERNEL % "y[0] = (float)helper_elsewhere(i);"
    assert check_source(source) == []
    result = compiled(source, ("-rdc=true",))  # separate compilation: the only way such a module links
    (refusal,) = check_ptx(result.ptx)
    assert refusal.evidence["construct"] == "helper_elsewhere" and refusal.evidence["function"] == "k"
    assert result.ptx.splitlines()[refusal.evidence["ptx_line"] - 1].strip().startswith("call")


@needs_nvdisasm
def test_the_compiled_code_check_runs_both_layers_and_names_each():
    result = compiled(HIDDEN_ASM % ("tr", 'if (i < 0) asm volatile(PART "ap;");'))
    ptx, sass = check_compiled(result)
    assert (ptx.evidence["layer"], ptx.evidence["construct"], ptx.evidence["function"]) == ("ptx", "trap", "k")
    assert ptx.location == f"PTX line {ptx.evidence['ptx_line']}, function k"
    assert result.ptx.splitlines()[ptx.evidence["ptx_line"] - 1].strip() == "trap;"
    assert (sass.evidence["layer"], sass.evidence["instruction"], sass.location) == ("sass", "BPT.TRAP 0x1", "function k")


def test_without_a_disassembler_the_ptx_findings_stand_and_a_clean_result_says_why(monkeypatch):
    def missing(cubin, timeout_s):
        raise RuntimeError("not executed: nvdisasm not found (install nvidia-cuda-nvdisasm)")

    monkeypatch.setattr(source_check, "disassemble", missing)
    assert [f.evidence["construct"] for f in check_compiled(compiled(KERNEL % 'asm volatile("brkpt;");'))] == ["brkpt"]
    assert check_compiled(compiled(KERNEL % "y[i] = 1.f;")) == "not executed: nvdisasm not found (install nvidia-cuda-nvdisasm)"
    no_ptx = compiled(KERNEL % "y[i] = 1.f;").model_copy(update={"ptx": None})
    assert "PTX check not executed" in check_compiled(no_ptx)


HONEST = [
    pytest.param("__device__ __noinline__ int exit_loop(int n) { int s = 0; for (int j = 0; j < n; ++j) s += j; return s; }\n"
                 + KERNEL % "y[0] = (float)exit_loop(i);", id="function_named_exit_loop"),
    pytest.param(KERNEL % '// clock64(), "%globaltimer", trap; and printf("clock") are only words here\n'
                 "/* asm(\"exit;\"); */ y[0] = 1.f;", id="words_in_comments"),
    pytest.param("__constant__ float table[4] = {1.f, 2.f, 3.f, 4.f};\n" + KERNEL % "y[0] = table[i & 3];",
                 id="constant_table"),
    pytest.param(KERNEL % "static __shared__ float tile[32];\ntile[threadIdx.x & 31] = y[threadIdx.x];\n"
                 "__syncthreads();\ny[threadIdx.x] = tile[(threadIdx.x + 1) & 31];", id="static_shared"),
    pytest.param(KERNEL % 'unsigned x;\nasm("{ .reg .u32 %r_clock;\\n mov.u32 %r_clock, %1;\\n add.u32 %0, %r_clock, 1; }"'
                 ' : "=r"(x) : "r"(i));\ny[0] = (float)x;', id="register_named_r_clock"),
    pytest.param("namespace tile { constexpr int kRows = 4; }\n" + KERNEL % "y[i * tile::kRows] = 1.f;",
                 id="namespace_constexpr"),
]


@needs_nvdisasm
@pytest.mark.parametrize("source", HONEST)
def test_honest_look_alikes_pass_both_checks(source):
    assert check_source(source) == []
    assert check_compiled(compiled(source)) == []


# Hand-written PTX for the parser's edge cases: names and comments that hold refused words, and the refused
# constructs behind a predicate, a label, a line-table directive or a module-scope initializer.
CLEAN_PTX = """\
.version 9.5
.target sm_90a
.address_size 64
.global .align 4 .u32 dead_constexpr = 4;  // never named again: NVRTC's constexpr objects look like this
.const .align 4 .b8 table[8] = {0, 0, 128, 63, 0, 0, 0, 64};
.func (.param .b32 func_retval0) exit_loop(.param .b32 n)
{
\t.reg .b32 %r_clock;
\tld.param.u32 %r_clock, [n];  // trap; exit; %clock64
\tst.param.b32 [func_retval0+0], %r_clock;
\tret;
}
.visible .entry k(.param .u64 k_param_0)
{
\t.reg .b32 %r<3>;
\t.pragma "trap; nanosleep";
\t.loc 1 2 3
\t// begin inline asm
\t/* exit; brkpt; */
$L__exit_1:
\tld.const.u32 %r1, [table];
\t{ // callseq 0, 0
\t.param .b32 param0;
\tst.param.b32 [param0+0], %r1;
\t.param .b32 retval0;
\tcall.uni (retval0),
\texit_loop,
\t(param0);
\t}
\tret;
}
"""
REFUSED_PTX = """\
.version 9.5
.target sm_90a
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);
.global .align 4 .u32 counter;
.global .align 8 .u64 alias = generic(counter);
.visible .entry k(.param .u64 k_param_0)
{
\t.reg .pred %p<2>;
\t.reg .b64 %rd<3>;
\t.loc 1 5 7 trap;
$L__BB0_1: @!%p1 exit;
\tmov.u64 %rd1, %globaltimer_hi;
\t@%p1 call.uni (retval0), vprintf, (param0, param1);
\tld.global.u64 %rd2, [alias];
}
"""


def test_names_comments_and_strings_that_hold_refused_words_pass():
    assert check_ptx(CLEAN_PTX) == []


def test_refused_constructs_are_found_by_their_tokens_with_their_lines():
    found = {f.evidence["construct"]: f.location for f in check_ptx(REFUSED_PTX)}
    assert found == {"trap": "PTX line 11, function k", "exit": "PTX line 12, function k",
                     "%globaltimer_hi": "PTX line 13, function k", "vprintf": "PTX line 14, function k",
                     "counter": "PTX line 5", "alias": "PTX line 6"}
