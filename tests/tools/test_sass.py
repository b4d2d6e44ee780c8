"""SASS instruction mix: the disassembler's output parsed (recorded fixture), and a live disassembly when available."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparseditto.knowledge_base.library import get_kernel
from sparseditto.tools.compiler import compile_source
from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.sass import (analyse_cubin, find_disassembler, forbidden_instructions, parse_sass,
                                     wgmma_register_hazards)

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


def _loop(wait_in_loop: str) -> str:
    """A consumer loop in the shape ptxas emits: the tile's metadata words loaded at the top, two sparse MMAs
    committed as one group, a wait, and the branch back."""
    return (".text.k:\n"
            "        /*0010*/   MOV R2, RZ ;\n"
            ".L_x_1:\n"
            "        /*0020*/   LDS R88, [R8+0x6000] ;\n"
            "        /*0030*/   LDS R89, [R8+0x6040] ;\n"
            "        /*0040*/   WARPGROUP.ARRIVE ;\n"
            "        /*0050*/   HGMMA.SP.64x128x32.F32 R24, gdesc[UR16].tnspB, R24, UP0, R88, 0x0 ;\n"
            "        /*0060*/   HGMMA.SP.64x128x32.F32 R24, gdesc[UR16].tnspB, R24, R89, 0x0, gsb0 ;\n"
            f"        /*0070*/   WARPGROUP.DEPBAR.LE gsb0, {wait_in_loop} ;\n"
            "        /*0080*/   IADD3 R2, R2, 0x1, RZ ;\n"
            "        /*0090*/   @P0 BRA `(.L_x_1) ;\n"
            "        /*00a0*/   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;\n"
            "        /*00b0*/   STG.E desc[UR4][R4.64], R24 ;\n"
            "        /*00c0*/   EXIT ;\n")


def test_metadata_rewritten_across_the_back_edge_with_a_group_in_flight_is_a_race():
    hazards = wgmma_register_hazards(_loop("0x1"))
    assert [(h.function, h.instruction, h.registers) for h in hazards] == [
        ("k", "LDS R88, [R8+0x6000]", [88]), ("k", "LDS R89, [R8+0x6040]", [89])]


def test_a_group_retired_before_the_next_load_is_no_race():
    assert wgmma_register_hazards(_loop("0x0")) == []


def test_the_accumulators_and_a_register_written_after_the_wait_are_no_race():
    listing = (".text.k:\n"
               "        /*0010*/   HGMMA.64x128x16.F32 R24, R152, gdesc[UR4], R24, gsb0 ;\n"
               "        /*0020*/   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;\n"
               "        /*0030*/   LDS.128 R152, [R8] ;\n"
               "        /*0040*/   FADD R24, R24, 1 ;\n"
               "        /*0050*/   HGMMA.64x128x16.F32 R24, R152, gdesc[UR4], R24, gsb0 ;\n"
               "        /*0060*/   LDS.64 R154, [R8] ;\n")
    assert [(h.instruction, h.registers) for h in wgmma_register_hazards(listing)] == [("LDS.64 R154, [R8]", [154, 155])]


def _hopper_2to4_listing(params, dtype="fp16", patch=None):
    """The machine code of sp24_wgmma_sp, or of its e4m3 sequence (its source changed by `patch` first, when given)."""
    from sparseditto.tools.sass import disassemble

    candidate = get_kernel("sp24_wgmma_sp_fp8" if dtype == "fp8_e4m3" else "sp24_wgmma_sp").instantiate(params)
    source = candidate.source if patch is None else patch(candidate.source)
    result = compile_source(source, "sm_90a", candidate.defines(dtype_info(dtype).code))
    assert result.ok, result.log[-2000:]
    assert "serialized" not in result.log, result.log  # ptxas notes C7510 .. C7520: wgmma issued one by one
    assert "'setmaxnreg' ignored" not in result.log, result.log  # notes C7504 .. C7508: no register moved
    return disassemble(result.cubin)


@pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not installed")
def test_the_shipped_hopper_2to4_kernel_retires_each_group_before_loading_the_next_metadata():
    for params in ({"BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 3, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
                   {"BM": 256, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
                   {"BM": 256, "BN": 128, "BK": 64, "STAGES": 6, "LAG": 2, "CLUSTER": 2, "INFLIGHT": 0, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
                   {"BM": 256, "BN": 128, "BK": 64, "STAGES": 6, "LAG": 2, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
                   {"BM": 256, "BN": 128, "BK": 128, "STAGES": 3, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 8, "PERSIST": 1, "CONSUMERS": 2}):
        assert wgmma_register_hazards(_hopper_2to4_listing(params)) == []


@pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("persist", [0, 1])
def test_three_consumer_warpgroups_take_the_producers_registers_without_spilling_or_serialising(persist, dtype):
    """CONSUMERS = 3 at 192 x 256: both setmaxnreg reach the machine code, nothing goes to local memory, each k-tile's
    four 128-column products are issued back to back (one wait, after the last) and no metadata word is rewritten
    while its group is in flight."""
    listing = _hopper_2to4_listing({"BM": 192, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0,
                                    "BTMA": 1, "RASTER": 8, "PERSIST": persist, "CONSUMERS": 3}, dtype)
    assert "USETMAXREG.DEALLOC.CTAPOOL 0x20" in listing and "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xa0" in listing
    assert "STL" not in listing and "LDL" not in listing
    products = [line for line in listing.splitlines() if "HGMMA.SP.64x128x32" in line]
    assert len(products) == 4 and ["gsb0" in line for line in products] == [False, False, False, True]
    assert wgmma_register_hazards(listing) == []


@pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize(("bk", "promote"), [(128, 1), (256, 1), (256, 2)])
def test_the_e4m3_kernel_promotes_each_groups_products_with_the_next_in_flight(bk, promote):
    """8-bit sparse wgmma (QGMMA.SP m64n128k64), promoted: per k-tile BK / 64 instructions in groups of PROMOTE, each
    group into one of two scratch arrays in turn, its first instruction overwriting it (RZ: no accumulator input),
    each group retired by a wait that leaves the next in flight (DEPBAR 1) but the last's (DEPBAR 0), then added into
    the fp32 accumulators; the consumers take the producer's registers (setmaxnreg 232 / 40), nothing in local
    memory, no register of a group rewritten while it is in flight."""
    listing = _hopper_2to4_listing({"BM": 128, "BN": 128, "BK": bk, "STAGES": 4, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0,
                                    "BTMA": 1, "RASTER": 8, "PERSIST": 0, "CONSUMERS": 2, "PROMOTE": promote,
                                    "SCRATCH": 2}, "fp8_e4m3")
    lines = listing.splitlines()
    products = [line for line in lines if "QGMMA.SP.64x128x64.F32.E4M3.E4M3" in line]
    groups = bk // 64 // promote
    assert len(products) == bk // 64
    assert [", RZ, !UPT," in line for line in products] == ([True] + [False] * (promote - 1)) * groups
    assert ["gsb0" in line for line in products] == ([False] * (promote - 1) + [True]) * groups
    scratch = [line.split("E4M3.E4M3")[1].split(",")[0].strip() for line in products[::promote]]
    assert len(set(scratch)) == 2 and all(a != b for a, b in zip(scratch, scratch[1:]))
    waits = [line.split("gsb0,")[1].strip(" ;") for line in lines if "WARPGROUP.DEPBAR.LE" in line]
    assert waits == ["0x1"] * (groups - 1) + ["0x0"]
    assert "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8" in listing and "USETMAXREG.DEALLOC.CTAPOOL 0x28" in listing
    assert sum("FADD" in line for line in lines) >= 64 * (groups - 1)  # scratch values added in (the first copied)
    assert "STL" not in listing and "LDL" not in listing
    assert wgmma_register_hazards(listing) == []


@pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize(("bk", "stages"), [(128, 6), (256, 3)])
def test_the_e4m3_kernel_with_one_scratch_array_retires_each_group_before_the_next_at_256_x_128(bk, stages):
    """SCRATCH 1 (256 x 128 tiles, two slabs per consumer): every group of PROMOTE 2 instructions goes into the same
    scratch registers, so each is retired by a full wait (DEPBAR 0) before the next is issued; 128 accumulators and
    64 scratch registers fit the consumers' 232 without local memory or hazards."""
    listing = _hopper_2to4_listing({"BM": 256, "BN": 128, "BK": bk, "STAGES": stages, "LAG": 1, "CLUSTER": 1,
                                    "INFLIGHT": 0, "BTMA": 1, "RASTER": 8, "PERSIST": 1, "CONSUMERS": 2, "PROMOTE": 2,
                                    "SCRATCH": 1}, "fp8_e4m3")
    lines = listing.splitlines()
    products = [line for line in lines if "QGMMA.SP.64x128x64.F32.E4M3.E4M3" in line]
    groups = 2 * bk // 64 // 2  # two slabs, PROMOTE 2
    assert len(products) == 2 * bk // 64
    assert len({line.split("E4M3.E4M3")[1].split(",")[0].strip() for line in products}) == 1
    waits = [line.split("gsb0,")[1].strip(" ;") for line in lines if "WARPGROUP.DEPBAR.LE" in line]
    assert waits == ["0x0"] * groups
    assert "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8" in listing
    assert "STL" not in listing and "LDL" not in listing
    assert wgmma_register_hazards(listing) == []


def test_three_consumers_cannot_issue_one_256_column_instruction_in_the_launchs_128_registers():
    """Why CONSUMERS = 3 splits a 256-column slab into two m64n128 instructions (MMA_N): with one m64n256 instruction
    ptxas refuses the kernel, since it fits every instruction into the 128 registers a thread has at launch, before
    setmaxnreg (error C7602, 155 needed)."""
    params = {"BM": 192, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 0, "BTMA": 1, "RASTER": 8,
              "PERSIST": 0, "CONSUMERS": 3}
    candidate = get_kernel("sp24_wgmma_sp").instantiate(params)
    source = candidate.source.replace("#if CONSUMERS == 3 && BN == 256\n#define MMA_N 128", "#if 0\n#define MMA_N 128")
    assert source != candidate.source
    result = compile_source(source, "sm_90a", candidate.defines(dtype_info("fp16").code))
    assert not result.ok and "C7602" in result.log and "155" in result.log, result.log[-1000:]


INFLIGHT_PARAMS = [{"BM": 256, "BN": 128, "BK": 64, "STAGES": 6, "LAG": 2, "CLUSTER": 1, "INFLIGHT": 1, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
                   {"BM": 256, "BN": 128, "BK": 64, "STAGES": 6, "LAG": 2, "CLUSTER": 2, "INFLIGHT": 1, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2},
                   {"BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "LAG": 1, "CLUSTER": 1, "INFLIGHT": 1, "BTMA": 0, "RASTER": 1, "PERSIST": 0, "CONSUMERS": 2}]


@pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("params", INFLIGHT_PARAMS, ids=["256x128", "256x128-cluster", "128x256"])
def test_one_group_in_flight_across_tiles_keeps_its_metadata_words_apart(params, dtype):
    """INFLIGHT = 1: the two arrays of words (even and odd tiles) in distinct registers, and the group still in flight
    when the next tile's group is issued (a wait for all groups but one in the loop)."""
    listing = _hopper_2to4_listing(params, dtype)
    assert wgmma_register_hazards(listing) == []
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in listing


def _one_array_in_flight(source: str) -> str:
    """The loop of INFLIGHT = 0 (one array of words, loaded at the top of each tile) leaving one group in flight:
    the version that measured wrong on the H200."""
    wait = 'asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");\n            sp24w_pin(acc);\n#endif\n            sp24w_release('
    end = "#else\n        // One tile of C per block (PERSIST is 0), one group in flight"
    assert source.count(wait) == 1 and source.count(end) == 1
    source = source.replace(wait, wait.replace("aligned 0", "aligned 1"))
    return source.replace(end, 'asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");\n' + end)


@pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not installed")
def test_one_array_of_words_with_a_group_in_flight_is_flagged():
    """The checker fails this kernel's code when it is wrong: ptxas gives the next tile's words the registers the
    group in flight reads, across the back edge, and says nothing."""
    params = {**INFLIGHT_PARAMS[0], "INFLIGHT": 0}
    hazards = wgmma_register_hazards(_hopper_2to4_listing(params, patch=_one_array_in_flight))
    assert {h.instruction.split()[0] for h in hazards} >= {"LDS"} and len({r for h in hazards for r in h.registers}) == 4
