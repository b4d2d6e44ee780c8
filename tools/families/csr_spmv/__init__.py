"""y = A x with A in CSR: the bandwidth-bound family."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Literal

from pydantic import Field, model_validator

from sparseditto.tools.families.base import StrategyStart
from sparseditto.tools.families.csr_common import KERNELS_ROOT, CsrFamily, CsrSpecFields
from sparseditto.tools.dtypes import dtype as dtype_info
from sparseditto.tools.families.csr_spmv.bsr import bsr_masked
from sparseditto.tools.families.csr_spmv.cost import BSR_BLOCKS, bsr_layout, dia_layout, predicted_us
from sparseditto.tools.families.csr_spmv.diagonal import diagonals
from sparseditto.tools.families.csr_spmv.merge_path import merge_path
from sparseditto.tools.families.csr_spmv.nonempty import nonempty_rows
from sparseditto.tools.families.csr_spmv.preparations import long_row_chunk_ptr
from sparseditto.tools.families.csr_spmv.rcm import rcm_reordered
from sparseditto.tools.families.csr_spmv.sell import sell_c_sigma
from sparseditto.tools.families.csr_spmv.u16 import csr_u16
from sparseditto.tools.structure import SHORT_ROW, WALK_GROUPS


class CsrSpmvSpec(CsrSpecFields):
    family: Literal["csr_spmv"] = "csr_spmv"
    operation: Literal["spmv"] = "spmv"
    N: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _vector(self) -> "CsrSpmvSpec":
        if self.N != 1:
            raise ValueError("spmv has N = 1; leave N out or use operation 'spmm'")
        return self


# the share of empty rows from which the nonempty-rows walk is offered (a guess, not measured): with few empty rows
# its lists (16 bytes per nonempty row) cost more than the row pointers it skips (4 bytes per empty row), and the
# cost model would still let it take a contender's iteration
MANY_EMPTY_ROWS = 0.25
# RCM renumbering is offered for square matrices whose x reads are scattered, at least this many distinct 32-byte
# sectors of x per nonzero within a band of rows (a mesh or road grid in a random order reads about one; in their
# natural order a few tenths), and whose graph is mesh-like: a breadth-first search takes at least MESH_LEVELS levels
# to reach 65,536 rows (the suite's road grids 193-195, stencil2d_9pt 176, fem3d_b4 15; its web, circuit and
# power-law graphs 4-7: evals/results/issue14_h200/planner_prices_session18.txt; a uniform random matrix, which never
# becomes banded, at most 8: tests/tools/test_structure.py). Both thresholds guesses, not measured.
SCATTERED_X = 0.6
MESH_LEVELS = 10
# the least block fill (nonzeros over stored elements) at which BSR is offered: below it a block stores more zeros
# than a CSR nonzero's column index costs (a guess from the bytes, not measured)
DENSE_BLOCKS = 0.5


class CsrSpmv(CsrFamily):
    name = "csr_spmv"
    operation = "spmv"
    spec_model = CsrSpmvSpec
    kernels_dir = KERNELS_ROOT / "csr_spmv"
    preparations = {"long_row_chunk_ptr": long_row_chunk_ptr, "sell_c_sigma": sell_c_sigma,
                    "diagonals": diagonals, "merge_path": merge_path, "csr_u16": csr_u16,
                    "nonempty_rows": nonempty_rows, "bsr_masked": bsr_masked,
                    "rcm_reordered": rcm_reordered}
    target_speedup = 1.5
    # a new version whenever prices change: calibrations measured against an older model no longer count
    cost_model = ("row walks as warp steps with a floor of started warps; nonempty-rows walks (session 17), BSR walks and "
                  "RCM renumbering (session 18)")
    example_spec = {"name": "small_spmv", "operation": "spmv", "pattern": {"distribution": "uniform", "nnz_per_row": 16},
                    "M": 65536, "K": 65536, "dtype": "fp32", "budget": {"iterations": 4}}
    dense_name = "x"
    output_name = "y"

    def strategies(self, spec: CsrSpmvSpec, features: Mapping[str, float]) -> list[StrategyStart]:
        """Every kernel at a start chosen from the features, ranked by its predicted time (`cost.py`): the
        planner re-ranks them by what earlier runs measured."""
        f = features

        def fastest_group(kernel: str, start: dict[str, int], groups: tuple[int, ...] = WALK_GROUPS,
                          widest: bool = True) -> int:
            """The lanes per row the cost model prices fastest (the warps' walk steps depend on it); of those within 10%
            the widest, whose lanes read a row in fewer, adjacent loads (what the step count does not see; measured at
            near-equal prices on two matrices, 4 lanes beat 2 by 4-12%). `widest` False takes the narrowest: where
            the rows walked are a few quads long, wider groups only add idle lanes and blocks (the nonempty rows of
            hypersparse_1m: a mean of 4 nonzeros; its first form's launch held 13,972 and 21,840 blocks at 8 and 16
            lanes, session 16)."""
            times = {g: self.predicted_us(spec, f, kernel, {**start, "GROUP": g}) for g in groups}
            near = [g for g, t in times.items() if t <= 1.1 * min(times.values())]
            return max(near) if widest else min(near)

        vec4 = {"UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0}
        # EARLY 1: the finishing launch begins while the first one drains; 1.3-3.9 us faster on all three matrices
        # measured (web, LP, small_l2_500k; spmv_sweep_session16_early_h200.txt), an ordinary launch before sm_90
        split = {"UNROLL": 2, "BLOCK": 256, "LONG_ROW": SHORT_ROW, "CHUNK": 4096, "HINT": 1, "EARLY": 1}
        u16 = {"UNROLL": 2, "BLOCK": 256, "HINT": 1}
        group = fastest_group("spmv_csr_vec4", vec4)
        split_group = fastest_group("spmv_csr_split_vec4", split, WALK_GROUPS[:-1])
        u16_group = fastest_group("spmv_csr_u16", u16)
        nonempty = {"UNROLL": 2, "BLOCK": 256, "LONG_ROW": SHORT_ROW, "HINT": 1}
        nonempty_group = fastest_group("spmv_csr_nonempty", nonempty, WALK_GROUPS[:-1], widest=False)
        stored, share = dia_layout(f, 64)
        max_diags = next((d for d in (8, 16, 32, 64) if d >= stored), 64)
        starts = [
            StrategyStart("spmv_csr_vec4", {"GROUP": group, **vec4},
                          f"CSR, {group} lanes per row (mean {f['row_mean']:.1f}), 4 nonzeros per 16-byte load"),
            StrategyStart("spmv_csr_split_vec4", {"GROUP": split_group, **split},
                          f"CSR with rows over {SHORT_ROW} cut into warp-sized chunks (max {f['row_max']:.0f}, "
                          f"cv {f['row_cv']:.2f}), {split_group} lanes per shorter row"),
            StrategyStart("spmv_merge_path", {"BLOCK": 256, "ITEMS": 8, "HINT": 1, "EARLY": 0},
                          f"merge path: equal shares of rows + nonzeros per thread, whatever the skew (cv {f['row_cv']:.2f})"),
            StrategyStart("spmv_sell_c_sigma", {"C": 32, "SIGMA": 4096, "BLOCK": 256},
                          f"SELL-32-4096: coalesced without shuffles on rows of similar length (cv {f['row_cv']:.2f})"),
            StrategyStart("spmv_dia", {"MAX_DIAGS": max_diags, "BLOCK": 256},
                          f"DIA: {share:.0%} of the nonzeros on the {stored:.0f} densest diagonals, no column indices"),
            StrategyStart("spmv_csr_u16", {"GROUP": u16_group, **u16},
                          f"16-bit column offsets (band half-width {f.get('bandwidth', 1.0) * f['cols']:.0f} columns), "
                          f"{u16_group} lanes per row"),
        ]
        if f["empty_rows"] >= MANY_EMPTY_ROWS:
            starts.append(StrategyStart("spmv_csr_nonempty", {"GROUP": nonempty_group, **nonempty},
                                        f"the nonempty rows only ({1 - f['empty_rows']:.0%} of them), {nonempty_group} "
                                        f"lanes per row, a warp per row over {nonempty['LONG_ROW']}; the empty ones "
                                        "zero-filled with coalesced stores"))
        bsr = {"UNROLL": 2, "BLOCK": 256}
        block = min(BSR_BLOCKS, key=lambda b: self.predicted_us(spec, f, "spmv_bsr", {"B": b, **bsr}))
        blocks, fill = bsr_layout(f, block)
        if fill >= DENSE_BLOCKS:
            starts.append(StrategyStart("spmv_bsr", {"B": block, **bsr},
                                        f"{block} x {block} dense blocks ({fill:.0%} full): one column index per block "
                                        f"({blocks:.3g} blocks), the absent entries masked"))
        if f["x_sectors_per_nnz"] >= SCATTERED_X and f.get("bfs_levels", 0.0) >= MESH_LEVELS:
            rcm_group = fastest_group("spmv_csr_rcm", {"UNROLL": 2, "BLOCK": 256})
            starts.append(StrategyStart("spmv_csr_rcm", {"GROUP": rcm_group, "UNROLL": 2, "BLOCK": 256},
                                        f"rows and columns renumbered by reverse Cuthill-McKee: x reads touch "
                                        f"{f['x_sectors_per_nnz']:.2f} sectors a nonzero in this order, "
                                        f"{rcm_group} lanes per row"))
        if f["row_max"] <= SHORT_ROW:  # nothing to split: the same walk as spmv_csr_vec4, priced the same, would
            starts = [s for s in starts if s.kernel != "spmv_csr_split_vec4"]  # take a contender's place
        ranked = [replace(s, predicted_us=self.predicted_us(spec, f, s.kernel, s.start)) for s in starts]
        return sorted(ranked, key=lambda s: s.predicted_us)

    def predicted_us(self, spec: CsrSpmvSpec, features: Mapping[str, float], kernel: str,
                     params: Mapping[str, int]) -> float:
        return predicted_us(kernel, params, features, dtype_info(spec.dtype).bytes)


FAMILY = CsrSpmv()
