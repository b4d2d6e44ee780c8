"""SASS instruction mix: the disassembler's output parsed (recorded fixture), and a live disassembly when available."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.tools.compiler import compile_source
from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.sass import analyse_cubin, find_disassembler, forbidden_instructions, parse_sass

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sass" / "spmm_csr_rowsplit_vw4_sm90.sass"


def test_recorded_listing():
    counts = parse_sass(FIXTURE.read_text())["spmm_csr_rowsplit"]
    assert counts.instructions > 100
    assert counts.global_loads_128 >= 1 and counts.global_loads >= counts.global_loads_128
    assert counts.global_stores >= 1 and counts.shuffles > 0
    assert counts.tensor_core == 0 and counts.local_loads == 0 == counts.local_stores


def test_predicated_and_wide_instructions_are_counted():
    listing = (".text.k:\n        /*0010*/   @!P1 LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;\n"
               "        /*0020*/   HMMA.16816.F32 R8, R4, R6, R8 ;\n        /*0030*/   STL [R1], R0 ;\n")
    c = parse_sass(listing)["k"]
    assert (c.instructions, c.global_loads_128, c.tensor_core, c.local_stores) == (3, 1, 1, 1)


def test_refused_instructions_are_named_with_their_function_and_an_early_exit_is_not():
    listing = (".text.k:\n        /*0010*/   @P0 EXIT ;\n        /*0020*/   S2UR UR4, SR_PM0 ;\n"
               "        /*0030*/   PMTRIG 0x2 ;\n        /*0040*/   CS2R R4, SR_CLOCKLO ;\n")
    assert [(f.function, f.instruction, f.what) for f in forbidden_instructions(listing)] == [
        ("k", "S2UR UR4, SR_PM0", "a clock, timer or performance-counter read"),
        ("k", "PMTRIG 0x2", "a performance-monitor event"),
    ]


@pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not installed")
def test_a_fresh_cubin_is_disassembled_without_a_gpu():
    k = get_kernel("spmv_csr_vec4").instantiate({"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0})
    result = compile_source(k.source, "sm_90", [*k.defines(dtype_info("fp32").code), *k.compile_options])
    counts = analyse_cubin(result.cubin)
    assert not isinstance(counts, str), counts
    assert counts["spmv_csr_vec4"].global_loads > 0
