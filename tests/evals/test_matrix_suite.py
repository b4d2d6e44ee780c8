"""The structure-class generators (small scales) and the synthetic matrix suite: canonical CSR with the promised
structure, determinism by seed, the suite's size and spread (from parameters, nothing large generated), and
files written in both formats read back by the project's reader."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner

from sparseditto.evals import matrix_suite
from sparseditto.evals.matrix_suite import SUITE, SUITE_BY_NAME, select, write_matrix, write_suite
from sparseditto.tools import generators
from sparseditto.tools.families.csr_common import MatrixFilePattern
from sparseditto.tools.matrices import load_matrix_file
from sparseditto.tools.structure import matrix_features

SCALE = 60_000


def features(matrix: sp.csr_matrix) -> dict[str, float]:
    return matrix_features(matrix, 4, np.random.default_rng(0))


def lengths(matrix: sp.csr_matrix) -> np.ndarray:
    return np.diff(matrix.indptr)


def offsets(matrix: sp.csr_matrix) -> np.ndarray:
    """Column minus row of every nonzero."""
    return matrix.indices.astype(np.int64) - np.repeat(np.arange(matrix.shape[0]), lengths(matrix))


def is_symmetric(matrix: sp.csr_matrix) -> bool:
    return matrix.shape[0] == matrix.shape[1] and (matrix != matrix.T).nnz == 0


def assert_canonical(matrix: sp.csr_matrix) -> None:
    assert isinstance(matrix, sp.csr_matrix)
    assert matrix.indices.dtype == np.int32 and matrix.indptr.dtype == np.int32 and matrix.data.dtype == np.float32
    assert matrix.indptr[0] == 0 and matrix.indptr[-1] == matrix.nnz == len(matrix.indices) == len(matrix.data)
    assert np.all(lengths(matrix) >= 0)
    assert matrix.indices.min() >= 0 and matrix.indices.max() < matrix.shape[1]
    step = np.diff(matrix.indices.astype(np.int64))
    within_row = np.ones(len(step), dtype=bool)
    within_row[matrix.indptr[1:-1][matrix.indptr[1:-1] > 0] - 1] = False  # a row's last entry against the next row's first
    assert np.all(step[within_row] > 0), "columns sorted and distinct in every row"
    assert np.all(np.isfinite(matrix.data)) and matrix.data.min() >= -1 and matrix.data.max() < 1


# every class with parameters that show its feature, at a small scale
CASES = {
    "stencil_2d/5": ("stencil_2d", {"points": 5}),
    "stencil_2d/9": ("stencil_2d", {"points": 9}),
    "stencil_3d/7": ("stencil_3d", {"points": 7}),
    "stencil_3d/27": ("stencil_3d", {"points": 27}),
    "fem_blocks/4": ("fem_blocks", {"block": 4}),
    "fem_blocks/24": ("fem_blocks", {"block": 24, "dim": 2}),
    "fem_blocks/3": ("fem_blocks", {"block": 3}),
    "power_law_graph/sym": ("power_law_graph", {"max_degree": 1000}),
    "power_law_graph/dir": ("power_law_graph", {"symmetric": False, "max_degree": 1000}),
    "road_grid/perm": ("road_grid", {}),
    "road_grid/ordered": ("road_grid", {"permute": False}),
    "circuit": ("circuit", {"dense": 4, "dense_len": (1000, 3000)}),
    "random_band": ("random_band", {"bandwidth": 32, "fill": 0.3}),
    "lp_rectangular": ("lp_rectangular", {"linking": 5, "linking_len": (1000, 3000)}),
    "lp_rectangular/tall": ("lp_rectangular", {"transpose": True}),
    "web_graph": ("web_graph", {}),
    "block_diagonal_dense": ("block_diagonal_dense", {"block": (16, 64)}),
    "empty_rows_mix": ("empty_rows_mix", {"empty": 0.7, "run": 4}),
    "small_l2": ("small_l2", {}),
}
_made: dict[str, sp.csr_matrix] = {}


def made(case: str) -> sp.csr_matrix:
    if case not in _made:
        cls, params = CASES[case]
        _made[case] = generators.generate(cls, SCALE, 7, **params)
    return _made[case]


def test_the_cases_cover_every_class_and_at_least_ten():
    assert {cls for cls, _ in CASES.values()} == set(generators.CLASSES)
    assert len(generators.CLASSES) >= 10
    for c in generators.CLASSES.values():
        assert c.doc and "(" in c.doc, f"{c.name}: say what real matrices it imitates"


@pytest.mark.parametrize("case", list(CASES))
def test_every_class_is_canonical_csr_of_the_size_it_announces(case):
    cls, params = CASES[case]
    matrix = made(case)
    assert_canonical(matrix)
    rows, cols, nnz = generators.size(cls, SCALE, **params)
    if cls == "block_diagonal_dense":  # random block sizes: the rows are an estimate too
        assert abs(matrix.shape[0] / rows - 1) < 0.2 and matrix.shape[0] == matrix.shape[1]
    else:
        assert matrix.shape == (rows, cols)
    assert abs(matrix.nnz / nnz - 1) < 0.15, (matrix.nnz, nnz)
    assert is_symmetric(matrix) == generators.CLASSES[cls].symmetric(params)


@pytest.mark.parametrize("case", ["stencil_2d/5", "stencil_2d/9", "stencil_3d/7", "stencil_3d/27"])
def test_stencils_have_their_points_on_fixed_diagonals(case):
    cls, params = CASES[case]
    points, dim = params["points"], 2 if cls == "stencil_2d" else 3
    matrix = made(case)
    n = round(matrix.shape[0] ** (1 / dim))
    assert n**dim == matrix.shape[0]
    row = lengths(matrix)
    assert row.max() == points and np.count_nonzero(row == points) == (n - 2) ** dim  # the interior is full
    assert row.min() == {5: 3, 9: 4, 7: 4, 27: 8}[points]  # a corner
    assert len(np.unique(offsets(matrix))) == points
    assert features(matrix)["diag_share_top32"] == 1.0


def test_fem_blocks_are_dense_blocks_on_a_block_pattern():
    assert features(made("fem_blocks/4"))["block_fill_4"] == 1.0
    big = features(made("fem_blocks/24"))
    assert big["block_fill_8"] == 1.0 and big["row_max"] <= 24 * 9 and np.all(lengths(made("fem_blocks/24")) % 24 == 0)
    three = made("fem_blocks/3")
    row = lengths(three)
    assert np.all(row % 3 == 0) and np.array_equal(row[0::3], row[1::3])  # a node's 3 rows share one pattern
    assert features(three)["neighbour_sharing"] > 0.6
    node = sp.csr_matrix(three[::3, ::3])  # the node graph: thinned, so node degrees vary
    assert lengths(node).min() < lengths(node).max() <= 27


def test_power_law_graphs_have_hubs_and_short_rows():
    sym, directed = features(made("power_law_graph/sym")), features(made("power_law_graph/dir"))
    for f in (sym, directed):
        assert f["row_cv"] > 2 and f["row_max"] > 30 * f["row_mean"] and f["dense_rows"] > 0
        assert f["row_p50"] < f["row_mean"]
    assert directed["empty_rows"] > 0
    assert not is_symmetric(made("power_law_graph/dir"))
    assert np.count_nonzero(offsets(made("power_law_graph/sym")) == 0) == 0  # no self loops


def test_road_grids_have_short_rows_no_diagonal_and_lose_locality_when_permuted():
    permuted, ordered = made("road_grid/perm"), made("road_grid/ordered")
    for matrix in (permuted, ordered):
        f = features(matrix)
        assert 2 <= f["row_mean"] <= 4 and f["row_max"] <= 8
        assert np.count_nonzero(offsets(matrix) == 0) == 0
    n = round(np.sqrt(ordered.shape[0]))
    assert np.abs(offsets(ordered)).max() <= n + 1
    assert features(permuted)["bandwidth"] > 0.5


def test_circuits_have_a_full_diagonal_short_rows_and_dense_rows_and_columns():
    matrix = made("circuit")
    f = features(matrix)
    assert np.count_nonzero(offsets(matrix) == 0) == matrix.shape[0]
    assert f["row_p90"] <= 10 and f["dense_rows"] >= 4 and f["dense_cols"] >= 4 and f["row_max"] >= 1000


def test_random_bands_stay_in_their_band_with_even_rows():
    matrix = made("random_band")
    off = offsets(matrix)
    rows = np.repeat(np.arange(matrix.shape[0]), lengths(matrix))
    interior = (rows >= 32) & (rows < matrix.shape[0] - 32)
    assert np.abs(off[interior]).max() <= 32 and np.abs(off).max() <= 64
    f = features(matrix)
    assert f["row_cv"] < 0.3 and abs(f["row_mean"] - 65 * 0.3) < 1


def test_lp_matrices_are_wide_uneven_with_linking_rows_and_slacks():
    matrix = made("lp_rectangular")
    M, K = matrix.shape
    assert K >= 3 * M
    f = features(matrix)
    assert f["row_cv"] > 1 and f["row_max"] >= 1000
    assert np.count_nonzero(lengths(matrix) >= 1000) == 5
    slack = sp.csr_matrix(matrix[:, K - M:])  # one slack column per row, in order
    assert slack.nnz == M and np.array_equal(slack.indices, np.arange(M))
    tall = made("lp_rectangular/tall")
    assert tall.shape[0] > 2 * tall.shape[1]


def test_web_graphs_have_dangling_rows_hubs_and_neighbours_sharing_links():
    f = features(made("web_graph"))
    assert 0.05 < f["empty_rows"] < 0.2 and f["row_cv"] > 2
    random_like = features(made("power_law_graph/dir"))
    assert f["neighbour_sharing"] > 0.05 > random_like["neighbour_sharing"]
    assert f["group_overlap"] > 1.1


def test_block_diagonal_dense_rows_are_their_whole_block():
    matrix = made("block_diagonal_dense")
    f = features(matrix)
    assert f["block_fill_4"] > 0.9
    row = lengths(matrix)
    assert row.min() >= 16 and row.max() <= 64
    first = matrix.indices[matrix.indptr[:-1]].astype(np.int64)
    last = matrix.indices[matrix.indptr[1:] - 1].astype(np.int64)
    assert np.array_equal(last - first + 1, row)  # contiguous columns
    r = np.arange(matrix.shape[0])
    assert np.all((first <= r) & (r <= last))  # the block holds the diagonal
    sparse = generators.generate("block_diagonal_dense", SCALE, 7, block=(16, 64), fill=0.5)
    assert_canonical(sparse)
    assert abs(sparse.nnz / SCALE - 0.5) < 0.1


def test_empty_rows_mix_leaves_most_rows_empty_in_runs():
    matrix = made("empty_rows_mix")
    f = features(matrix)
    assert abs(f["empty_rows"] - 0.7) < 0.05
    filled = (lengths(matrix)[: matrix.shape[0] // 4 * 4] > 0).reshape(-1, 4)
    mixed = filled.any(axis=1) & ~filled.all(axis=1)  # runs of 4 rows: all empty or all filled
    assert not mixed.any()


def test_small_l2_fits_in_l2_and_refuses_what_does_not():
    f = features(made("small_l2"))
    assert f["bytes_over_l2"] < 1 and f["row_cv"] > 0.3 and f["diag_share_top32"] > 0.1
    with pytest.raises(ValueError, match="L2"):
        generators.generate("small_l2", 10_000_000, 1)


@pytest.mark.parametrize("case", ["stencil_2d/5", "power_law_graph/sym", "circuit", "web_graph", "lp_rectangular",
                                  "block_diagonal_dense"])
def test_the_same_seed_gives_the_same_matrix_and_another_seed_another(case):
    cls, params = CASES[case]
    a, b = made(case), generators.generate(cls, SCALE, 7, **params)
    assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices) and np.array_equal(a.data, b.data)
    c = generators.generate(cls, SCALE, 8, **params)
    assert not np.array_equal(a.data[: min(a.nnz, c.nnz)], c.data[: min(a.nnz, c.nnz)])
    if cls != "stencil_2d":
        assert a.nnz != c.nnz or not np.array_equal(a.indices, c.indices)


def test_an_unknown_class_or_stencil_is_refused():
    with pytest.raises(ValueError, match="no structure class"):
        generators.generate("nope", 100, 1)
    with pytest.raises(ValueError, match="points"):
        generators.generate("stencil_3d", 1000, 1, points=9)


# ----------------------------------------------------------------------------------------------- the suite


def test_the_suite_has_30_matrices_over_8_classes_at_h200_sizes():
    assert len(SUITE) >= 30
    assert len({m.name for m in SUITE}) == len(SUITE) and len({m.seed for m in SUITE}) == len(SUITE)
    classes = {m.cls for m in SUITE}
    assert len(classes) >= 8 and classes <= set(generators.CLASSES)
    sizes = {m.name: m.size for m in SUITE}  # from the parameters: nothing generated
    large = [m for m in SUITE if not m.fits_l2]
    assert len(large) >= 20
    for m in SUITE:
        nnz = sizes[m.name][2]
        assert nnz <= matrix_suite.MAX_NNZ * 0.97, m.name  # room for the estimate's error
        assert nnz >= matrix_suite.MIN_NNZ or m.fits_l2, f"{m.name}: a matrix under 1M nonzeros is one of the small ones"
    assert max(sizes[m.name][2] for m in large) >= 50_000_000
    assert sum(m.fits_l2 for m in SUITE) >= 3
    assert any(sizes[m.name][0] != sizes[m.name][1] for m in SUITE)  # rectangular shapes
    assert any(m.symmetric for m in SUITE) and any(m.pattern for m in SUITE)


def test_selection_by_name_class_and_size():
    assert [m.name for m in select(["small_l2_50k,stencil2d_5pt_1m"])] == ["stencil2d_5pt_1m", "small_l2_50k"]
    assert {m.cls for m in select(["road_grid"])} == {"road_grid"}
    assert all(m.nnz <= 2_000_000 for m in select(max_nnz=2_000_000)) and select(max_nnz=2_000_000)
    with pytest.raises(ValueError, match="no suite matrix or class"):
        select(["nope"])


def _read(path) -> sp.csr_matrix:
    return load_matrix_file(MatrixFilePattern(kind="matrix_file", path=path))


@pytest.mark.parametrize("fmt", ["npz", "mtx"])
def test_write_suite_writes_files_the_project_reads_back(tmp_path, fmt):
    entry = SUITE_BY_NAME["small_l2_50k"]
    events = []
    records = write_suite(tmp_path, ["small_l2_50k"], fmt, on_event=lambda kind, e, info: events.append(kind))
    assert [r["name"] for r in records] == ["small_l2_50k"] and events == ["start", "generated", "done"]
    path = tmp_path / f"small_l2_50k.{fmt}"
    expected = entry.generate()
    back = _read(path)
    assert back.shape == expected.shape
    assert np.array_equal(back.indptr, expected.indptr) and np.array_equal(back.indices, expected.indices)
    assert np.array_equal(back.data.astype(np.float32), expected.data)  # 9 digits: the same float32
    manifest = json.loads((tmp_path / "suite.json").read_text())["matrices"][path.name]
    assert manifest["nnz"] == expected.nnz and manifest["seed"] == entry.seed and manifest["file"] == path.name
    events.clear()
    write_suite(tmp_path, ["small_l2_50k"], fmt, on_event=lambda kind, e, info: events.append(kind))
    assert events == ["kept"]  # a file already written is kept


def test_symmetric_and_pattern_matrix_market_files_read_back(tmp_path):
    stencil = generators.generate("stencil_2d", 20_000, 3, points=9)
    path = write_matrix(tmp_path / "stencil", stencil, "mtx", symmetric=True)
    header = path.read_text().splitlines()
    assert header[0] == "%%MatrixMarket matrix coordinate real symmetric"
    assert int(header[1].split()[2]) == (stencil.nnz + stencil.shape[0]) // 2  # one triangle
    back = _read(path)
    assert (back.astype(np.float32) != stencil).nnz == 0
    graph = generators.generate("power_law_graph", 20_000, 3)
    path = write_matrix(tmp_path / "graph.mtx", graph, "mtx", symmetric=True, pattern=True)
    assert path.read_text().splitlines()[0] == "%%MatrixMarket matrix coordinate pattern symmetric"
    back = _read(path)
    assert np.array_equal(back.indptr, graph.indptr) and np.array_equal(back.indices, graph.indices)


def test_matrix_market_text_of_special_values(tmp_path):
    values = np.array([0.0, -0.0, 1.0, -1.0, 0.999999940, 1e-45, -3.4028235e38, 1.1754944e-38, 123456.789], np.float32)
    matrix = sp.csr_matrix((values, np.arange(len(values)), [0, len(values)]), shape=(1, len(values)))
    path = write_matrix(tmp_path / "v.mtx", matrix, "mtx")
    lines = path.read_text().splitlines()
    assert lines[-9:][:4] == ["1 1 0.00000000e+00", "1 2 0.00000000e+00", "1 3 1.00000000e+00", "1 4 -1.00000000e+00"]
    read = np.array([float(line.split()[2]) for line in lines[-9:]], dtype=np.float32)
    assert np.array_equal(read, values)


def test_cli_lists_and_writes(tmp_path):
    runner = CliRunner()
    listed = runner.invoke(matrix_suite.app, ["--list", "--max-nnz", "1000000"])
    assert listed.exit_code == 0, listed.output
    assert "small_l2_50k" in listed.output and "stencil3d_27pt_58m" not in listed.output
    wrote = runner.invoke(matrix_suite.app, [str(tmp_path), "--names", "small_l2_50k", "--format", "mtx"])
    assert wrote.exit_code == 0, wrote.output
    assert (tmp_path / "small_l2_50k.mtx").is_file() and (tmp_path / "suite.json").is_file()
    bad = runner.invoke(matrix_suite.app, [str(tmp_path), "--names", "nope"])
    assert bad.exit_code == 2 and "no suite matrix" in bad.output
