"""Which sanitizer tools a compiled kernel gives nothing to find, judged from its machine code: racecheck needs
shared memory, synccheck needs barriers or warp-level synchronisation. Compiled here (NVRTC), read with nvdisasm."""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.spec import parse_spec
from sparseditto.tools.sass import find_disassembler
from sparseditto.tools.verifier import check_and_compile, needless_tools

pytestmark = pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not found: the SASS cannot be read")

SPMV = parse_spec({"operation": "spmv", "pattern": {"nnz_per_row": 16}, "M": 4096, "K": 4096})
SPMM = parse_spec({"operation": "spmm", "pattern": {"density": 0.02}, "M": 1024, "K": 1024, "N": 64, "dtype": "fp16"})


def needless(kernel: str, params: dict[str, int], spec) -> dict[str, str]:
    candidate = get_kernel(kernel).instantiate(params)
    result, feedback, sass = check_and_compile(candidate, spec, "sm_90")
    assert result is not None and result.ok and sass, [f.message for f in feedback]
    return needless_tools(candidate, result, sass)


def test_one_thread_per_row_without_shared_memory_needs_neither():
    assert set(needless("spmv_dia", {"MAX_DIAGS": 8, "BLOCK": 256}, SPMV)) == {"racecheck", "synccheck"}


def test_lanes_that_shuffle_keep_synccheck():
    assert set(needless("spmv_csr_vec4", {"GROUP": 4, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0}, SPMV)) == {"racecheck"}


def test_shared_memory_and_barriers_keep_every_tool():
    assert needless("spmm_csr_smem_tile", {"LPR": 8, "WARPS": 32, "RPG": 1, "KC": 512, "UNROLL": 4}, SPMM) == {}


def test_without_the_machine_code_every_tool_runs():
    candidate = get_kernel("spmv_dia").instantiate({"MAX_DIAGS": 8, "BLOCK": 256})
    result, _, _ = check_and_compile(candidate, SPMV, "sm_90")
    assert needless_tools(candidate, result, {}) == {}
