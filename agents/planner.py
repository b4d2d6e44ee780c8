"""Planner: spec (+ matrix features) -> plan. Offline expert rules, no LLM needed.

Starting points come from measurements on an H200 (bench/NOTES.md); the search spaces are the
kernels' declared parameter ranges, narrowed to values valid for the dtype.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparseditto.agents.schemas import Acceptance, Plan, Strategy
from sparseditto.knowledge_base.library import get_kernel, kernels_for
from sparseditto.spec import MatrixFilePattern, Spec
from sparseditto.tools.families.csr import spec_matrix_shape
from sparseditto.tools.matrices import generate_csr, load_matrix_file, row_lengths
from sparseditto.tools.preparations import row_group_keys

TARGET_SPEEDUP = {"csr_spmv": 1.5, "csr_spmm": 3.0}
# rows sharing each column of a group of 8 from which tensor-core row groups lead: on the H200 they beat row split
# on a banded fp16 5% matrix (2.76 rows per column: 33.4 vs 61.7 us) and lost on uniform ones (1.04-1.19)
SHARED_COLUMNS_FOR_TENSOR_CORES = 2.0
# the search space of the shared-memory SpMM stops here, leaving room for L1 (the launch check applies the
# architecture's own limit: tools.contract.max_shared_bytes_per_block)
SMEM_TILE_BYTES = 200 * 1024


def group_overlap(matrix: sp.csr_matrix) -> float:
    """Nonzeros per distinct (group of 8 rows, column) pair: how many rows of a group share a column on
    average (1 for unrelated rows; up to 8). It is the reuse a tensor-core tile over 8 rows gets."""
    _, pairs, _ = row_group_keys(matrix.indptr, matrix.indices)
    return matrix.nnz / len(pairs) if len(pairs) else 0.0


def matrix_features(spec: Spec) -> dict[str, float]:
    """Row-length statistics that decide the strategy (skew calls for the long-row split), and for SpMM
    the column sharing among neighbouring rows (it calls for the tensor-core row groups)."""
    rng = np.random.default_rng(spec.seed)
    matrix = None
    if isinstance(spec.pattern, MatrixFilePattern):
        matrix = load_matrix_file(spec.pattern)
        (M, K), nnz = matrix.shape, matrix.nnz
    else:
        M, K, nnz = spec_matrix_shape(spec)
        if spec.family == "csr_spmm":
            matrix = generate_csr(spec.pattern, M, K, np.float32, rng)
    lengths = np.diff(matrix.indptr) if matrix is not None else row_lengths(spec.pattern, M, K, rng)
    mean = float(lengths.mean()) if len(lengths) else 0.0
    features = {
        "rows": float(M),
        "cols": float(K),
        "nnz": float(nnz),
        "mean_row": mean,
        "max_row": float(lengths.max()) if len(lengths) else 0.0,
        "row_cv": float(lengths.std() / mean) if mean else 0.0,
        "density": nnz / (M * K) if M and K else 0.0,
    }
    if spec.family == "csr_spmm":
        features |= {"N": float(spec.N), "group_overlap": group_overlap(matrix)}
    return features


def _valid(kernel: str, params: dict[str, int], dtype: str, n_cols: int | None = None) -> bool:
    """Parameter combinations the kernel supports for this dtype (16-byte vector limit and the like); with the
    dense operand's column count, also those that leave no warp of a block without columns."""
    vb = 4 if dtype == "fp32" else 2
    if "VW" in params and (params["VW"] * vb > 16 or (vb == 2 and params["VW"] < 2)):
        return False
    if kernel == "spmm_csr_smem_tile" and params.get("KC", 0) * params.get("LPR", 0) * 16 > SMEM_TILE_BYTES:
        return False
    if kernel == "spmm_csr_tc_rowgroup" and n_cols and params.get("WN", 1) > 1:
        return 16 * params.get("MT", 1) * (params["WN"] - 1) < n_cols
    return True


def _space(kernel: str, dtype: str) -> dict[str, list[int]]:
    ref = get_kernel(kernel)
    space = {k: list(v) for k, v in ref.parameters.items()}
    if "VW" in space:
        space["VW"] = [v for v in space["VW"] if _valid(kernel, {"VW": v}, dtype)]
    return space


def _pow2_at_most(x: float, choices: list[int]) -> int:
    fitting = [c for c in choices if c <= max(x, 1)]
    return max(fitting) if fitting else min(choices)


def offline_plan(spec: Spec, feats: dict[str, float] | None = None) -> Plan:
    """Strategies from the spec and its matrix features (computed here unless the caller has them)."""
    feats = feats if feats is not None else matrix_features(spec)
    family = spec.family
    available = {k.name for k in kernels_for(family, spec.dtype, spec.arch)}
    strategies: list[Strategy] = []
    if family == "csr_spmv":
        skewed = feats["row_cv"] > 1.0 or feats["max_row"] > 16 * max(feats["mean_row"], 1)
        group = _pow2_at_most(feats["mean_row"] / 4, [1, 2, 4, 8, 16, 32])
        vector = Strategy(
            kernel="spmv_csr_vec4",
            start={"GROUP": group, "UNROLL": 2, "BLOCK": 256, "HINT": 1, "XL": 0},
            space=_space("spmv_csr_vec4", spec.dtype),
            why=f"rows of similar length (mean {feats['mean_row']:.1f}): {group} lanes per row, 4 nonzeros per 16-byte load",
        )
        split = Strategy(
            kernel="spmv_csr_split_vec4",
            start={"GROUP": min(16, max(1, group)), "UNROLL": 2, "BLOCK": 256, "LONG_ROW": 64, "CHUNK": 4096, "HINT": 1},
            space=_space("spmv_csr_split_vec4", spec.dtype),
            why=f"skewed rows (max {feats['max_row']:.0f}, cv {feats['row_cv']:.2f}): long rows cut into warp-sized chunks",
        )
        strategies = [split, vector] if skewed else [vector, split]
    elif family == "csr_spmm":
        wide = 4 if spec.dtype == "fp32" else 8
        overlap = feats["group_overlap"]
        tc_start = {"MT": 4, "WN": 1, "WK": 1, "KB": 2}
        tc_start["WN"] = max(w for w in (1, 2, 4) if _valid("spmm_csr_tc_rowgroup", {**tc_start, "WN": w}, spec.dtype, spec.N))
        rowsplit = Strategy(
            kernel="spmm_csr_rowsplit",
            start={"VW": wide, "WARPS": 4, "UNROLL": 8 if spec.dtype == "fp32" else 4},
            space=_space("spmm_csr_rowsplit", spec.dtype),
            why="warp per row with 16-byte gathers of B rows: robust at any density",
        )
        smem_tile = Strategy(
            kernel="spmm_csr_smem_tile",
            start={"LPR": 8, "WARPS": 32, "RPG": 1, "KC": 512, "UNROLL": 4},
            space=_space("spmm_csr_smem_tile", spec.dtype),
            why="a column slice of B in shared memory, reused by many rows: far less L2 traffic than row split, "
                "though latency-bound and slower on the uniform matrices measured",
        )
        tensor = Strategy(
            kernel="spmm_csr_tc_rowgroup",
            start=tc_start,
            space=_space("spmm_csr_tc_rowgroup", spec.dtype),
            why=f"16-bit values on tensor cores over groups of 8 rows, which share columns {overlap:.2f}x on average",
        )
        lead_with_tensor = overlap >= SHARED_COLUMNS_FOR_TENSOR_CORES
        strategies = [tensor, rowsplit, smem_tile] if lead_with_tensor else [rowsplit, smem_tile, tensor]
    strategies = [s for s in strategies if s.kernel in available]
    return Plan(
        family=family,
        format="csr",
        features=feats,
        strategies=strategies,
        baselines=list(spec.baselines),
        acceptance=Acceptance(min_speedup=1.0, target_speedup=TARGET_SPEEDUP.get(family, 2.0)),
        notes="offline expert policy",
    )


def is_valid_choice(kernel: str, params: dict[str, int], dtype: str, n_cols: int | None = None) -> bool:
    return _valid(kernel, params, dtype, n_cols)
