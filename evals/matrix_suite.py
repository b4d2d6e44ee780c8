"""The synthetic matrix suite: SuiteSparse-like matrices from the project's own seeded generators
(`sparseditto.tools.generators`), at sizes that fill an H200 (1M to 60M nonzeros) plus a few below its L2.

Each entry names a structure class, its parameters, a seed and the nonzeros wanted; the same entry always
gives the same matrix. `write_suite` writes them as SciPy .npz (fast, the default) or Matrix Market files
(written with NumPy; symmetric entries as one triangle with a `symmetric` header, graph entries as `pattern`
files, as real collections hold them), which `sparseditto eval --matrices FOLDER` and a spec's
`pattern: {kind: matrix_file}` read.

    python -m sparseditto.evals.matrix_suite OUT_DIR [--names a,b] [--format npz|mtx] [--max-nnz N]
    python -m sparseditto.evals.matrix_suite --list
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import scipy.sparse as sp
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table as RichTable

from sparseditto.tools import generators
from sparseditto.tools.structure import H200_L2_BYTES, spmv_bytes

MANIFEST = "suite.json"
FORMATS = ("npz", "mtx")
MIN_NNZ, MAX_NNZ = 1_000_000, 60_000_000  # the large entries' range


@dataclass(frozen=True)
class SuiteMatrix:
    """One matrix of the suite: a structure class at `scale` nonzeros from `seed`; `pattern` writes a Matrix
    Market file without values (values are drawn when a spec uses it)."""

    name: str
    cls: str
    scale: int
    seed: int
    params: dict[str, Any] = field(default_factory=dict)
    pattern: bool = False
    note: str = ""

    @property
    def size(self) -> tuple[int, int, int]:
        """(rows, cols, nonzeros) from the parameters, nothing generated (nonzeros an estimate for random classes)."""
        return generators.size(self.cls, self.scale, **self.params)

    @property
    def nnz(self) -> int:
        return self.size[2]

    @property
    def symmetric(self) -> bool:
        return generators.CLASSES[self.cls].symmetric(self.params)

    @property
    def l2_bytes(self) -> int:
        """What a fp32 SpMV over it streams: values and column indices, row pointers, x and y."""
        return spmv_bytes(*self.size)

    @property
    def fits_l2(self) -> bool:
        return self.l2_bytes <= H200_L2_BYTES

    def generate(self) -> sp.csr_matrix:
        return generators.generate(self.cls, self.scale, self.seed, **self.params)


def _m(name: str, cls: str, scale: float, seed: int, note: str = "", pattern: bool = False, **params: Any) -> SuiteMatrix:
    return SuiteMatrix(name, cls, int(scale), seed, params, pattern, note)


M_ = 1_000_000
SUITE: tuple[SuiteMatrix, ...] = (
    # 2D and 3D stencils: fixed diagonals
    _m("stencil2d_5pt_1m", "stencil_2d", 1 * M_, 101, "a 2D Poisson problem below L2", points=5),
    _m("stencil2d_5pt_20m", "stencil_2d", 20 * M_, 102, "2000 x 2000 grid", points=5),
    _m("stencil2d_9pt_45m", "stencil_2d", 45 * M_, 103, points=9),
    _m("stencil3d_7pt_10m", "stencil_3d", 10 * M_, 104, points=7),
    _m("stencil3d_19pt_30m", "stencil_3d", 30 * M_, 105, points=19),
    _m("stencil3d_27pt_58m", "stencil_3d", 58 * M_, 106, "130^3 grid", points=27),
    # finite elements: dense node blocks
    _m("fem3d_b3_30m", "fem_blocks", 30 * M_, 201, "3 displacements per node (bcsstk-, ldoor-like)", block=3, dim=3),
    _m("fem3d_b4_8m", "fem_blocks", 8 * M_, 202, block=4, dim=3, drop=0.3),
    _m("fem3d_b6_50m", "fem_blocks", 50 * M_, 203, "shells: 6 unknowns per node", block=6, dim=3, drop=0.35),
    _m("fem2d_b24_40m", "fem_blocks", 40 * M_, 204, "dense 24 x 24 blocks", block=24, dim=2, drop=0.2),
    # power-law graphs: hubs of thousands
    _m("powerlaw_sym_2m", "power_law_graph", 2 * M_, 301, pattern=True, avg_degree=8, exponent=2.3, max_degree=1500),
    _m("powerlaw_sym_30m", "power_law_graph", 30 * M_, 302, "social graph, hubs of 4000", pattern=True,
       avg_degree=16, exponent=2.1, max_degree=4000),
    _m("powerlaw_sym_55m", "power_law_graph", 55 * M_, 303, pattern=True, avg_degree=32, exponent=2.3, max_degree=3500),
    _m("powerlaw_dir_15m", "power_law_graph", 15 * M_, 304, "directed, empty rows", pattern=True,
       avg_degree=10, exponent=2.0, max_degree=8000, symmetric=False),
    # road networks
    _m("road_perm_8m", "road_grid", 8 * M_, 401, "permuted", pattern=True, keep=0.62, diagonals=0.05),
    _m("road_perm_24m", "road_grid", 24 * M_, 402, "permuted", pattern=True, keep=0.62, diagonals=0.05),
    _m("road_ordered_6m", "road_grid", 6 * M_, 403, "in grid order (locality kept)", keep=0.7, diagonals=0.1, permute=False),
    # circuits: short rows, a few dense rows and columns
    _m("circuit_5m", "circuit", 5 * M_, 501, dense=6, dense_len=(1000, 5000)),
    _m("circuit_25m", "circuit", 25 * M_, 502, "20 supply nets of 2k-20k", row_mean=5.5, dense=20, dense_len=(2000, 20000)),
    _m("circuit_arrow_3m", "circuit", 3 * M_, 503, "one full row and column (arrow-head)", row_mean=4.0, dense=1,
       dense_len=(10**9, 10**9), far=0.01),
    # random bands
    _m("band_narrow_10m", "random_band", 10 * M_, 601, bandwidth=16, fill=0.6),
    _m("band_128_30m", "random_band", 30 * M_, 602, bandwidth=128, fill=0.2),
    _m("band_wide_50m", "random_band", 50 * M_, 603, "40 per row in a band of 8001", bandwidth=4000, fill=0.005),
    # linear programs: rectangular
    _m("lp_wide_6m", "lp_rectangular", 6 * M_, 701, aspect=4.0, row_mean=12.0),
    _m("lp_wide_25m", "lp_rectangular", 25 * M_, 702, "40 linking rows of 10k-100k", aspect=12.0, row_mean=20.0,
       row_sigma=1.3, linking=40, linking_len=(10_000, 100_000)),
    _m("lp_rail_12m", "lp_rectangular", 12 * M_, 703, "few rows of thousands (rail4284-like)", aspect=250.0,
       row_mean=2500.0, row_sigma=0.8, linking=0, slack=False),
    _m("lp_tall_4m", "lp_rectangular", 4 * M_, 704, "transposed: tall least squares", aspect=3.0, row_mean=10.0,
       transpose=True),
    # web graphs: locality and copying
    _m("web_3m", "web_graph", 3 * M_, 801, pattern=True, avg_degree=10),
    _m("web_20m", "web_graph", 20 * M_, 802, pattern=True, avg_degree=14),
    _m("web_50m", "web_graph", 50 * M_, 803, "hubs of 5000, 15% dangling", pattern=True, avg_degree=20,
       max_degree=5000, dangling=0.15),
    # dense blocks
    _m("blockdiag_64_512_20m", "block_diagonal_dense", 20 * M_, 901, block=(64, 512)),
    _m("blockdiag_8_32_10m", "block_diagonal_dense", 10 * M_, 902, "block-Jacobi: many small blocks", block=(8, 32)),
    _m("smalldense_1800", "block_diagonal_dense", 3_240_000, 903, "one 1800 x 1800 block, 30% full (mbeacxc-like)",
       block=(1800, 1800), fill=0.3),
    # many empty rows
    _m("empty70_10m", "empty_rows_mix", 10 * M_, 1001, empty=0.7, row_mean=8.0),
    _m("empty95_tall_4m", "empty_rows_mix", 4 * M_, 1002, "95% empty in runs of 16, tall", empty=0.95, row_mean=6.0,
       aspect=0.25, run=16),
    _m("hypersparse_1m", "empty_rows_mix", 1 * M_, 1003, "98% empty in runs of 64", empty=0.98, row_mean=4.0, run=64),
    # below the H200's L2
    _m("small_l2_50k", "small_l2", 50_000, 1101, "launch latency"),
    _m("small_l2_500k", "small_l2", 500_000, 1102, row_mean=12.0),
    _m("small_l2_4m", "small_l2", 4 * M_, 1103, "about 35 MiB of SpMV data, under the 60 MiB L2", row_mean=10.0),
)
SUITE_BY_NAME = {m.name: m for m in SUITE}


def select(names: Iterable[str] | None = None, max_nnz: int | None = None, min_nnz: int | None = None) -> list[SuiteMatrix]:
    """The entries named (an entry or a structure class; commas separate names), in suite order, within the
    nonzero bounds (estimated sizes). A name that is neither is a ValueError listing what exists."""
    chosen = list(SUITE)
    if names:
        wanted = [n.strip() for name in names for n in name.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in SUITE_BY_NAME and n not in generators.CLASSES]
        if unknown:
            raise ValueError(f"no suite matrix or class {', '.join(unknown)}; matrices: {', '.join(SUITE_BY_NAME)}; "
                             f"classes: {', '.join(generators.CLASSES)}")
        chosen = [m for m in SUITE if m.name in wanted or m.cls in wanted]
    return [m for m in chosen if (max_nnz is None or m.nnz <= max_nnz) and (min_nnz is None or m.nnz >= min_nnz)]


# ----------------------------------------------------------------------------------------------- writing

_POW10 = 10 ** np.arange(19, dtype=np.int64)


def _digits(values: np.ndarray) -> np.ndarray:
    """Decimal text of non-negative integers: an (n, width) uint8 array, left-padded with NUL (removed later)."""
    values = np.asarray(values)
    count = np.maximum(np.searchsorted(_POW10, values, side="right"), 1)  # digits of each value
    width = int(count.max(initial=1))
    out = np.empty((len(values), width), dtype=np.uint8)
    rest = values.astype(np.int32 if width < 10 else np.int64)  # 32-bit division is the faster
    for p in range(width - 1, -1, -1):
        quotient = rest // 10
        out[:, p] = rest - quotient * 10
        rest = quotient
    out += ord("0")
    out[np.arange(width)[None, :] < (width - count)[:, None]] = 0
    return out


def _float_text(values: np.ndarray) -> np.ndarray:
    """Decimal text of float32 values, 9 significant digits (enough to read back the same float32):
    `-d.dddddddde-XX` as an (n, 15) uint8 array, NUL where a '+' sign would be."""
    a = np.abs(values.astype(np.float64))
    if not np.isfinite(a).all():
        raise ValueError("matrix values must be finite to write them")
    zero = a == 0
    exp = np.floor(np.log10(np.where(zero, 1.0, a))).astype(np.int64)
    mant = np.rint(a * np.power(10.0, 8 - exp)).astype(np.int32)
    over = mant >= 10**9  # rounding carried into a tenth digit
    mant[over] //= 10
    exp[over] += 1
    low = (mant < 10**8) & ~zero  # log10 rounding at a power of ten
    mant[low] *= 10
    exp[low] -= 1
    exp[zero] = 0
    n = len(values)
    out = np.zeros((n, 15), dtype=np.uint8)
    out[:, 0] = np.where(np.signbit(values) & ~zero, ord("-"), 0)
    m = _digits(mant)
    m = np.concatenate([np.full((n, 9 - m.shape[1]), ord("0"), np.uint8), m], axis=1) if m.shape[1] < 9 else m
    m[m == 0] = ord("0")
    out[:, 1] = m[:, 0]
    out[:, 2] = ord(".")
    out[:, 3:11] = m[:, 1:9]
    out[:, 11] = ord("e")
    out[:, 12] = np.where(exp < 0, ord("-"), ord("+"))
    e = np.abs(exp)
    out[:, 13] = (e // 10) % 10 + ord("0")
    out[:, 14] = e % 10 + ord("0")
    return out


def write_mtx(path: Path, matrix: sp.csr_matrix, symmetric: bool = False, pattern: bool = False,
              comment: str = "", chunk: int = 1 << 20) -> None:
    """A Matrix Market coordinate file, formatted with NumPy in chunks (scipy.io.mmwrite takes minutes for tens
    of millions of entries): `symmetric` writes the lower triangle under a symmetric header (the matrix must
    be symmetric), `pattern` writes no values."""
    matrix = sp.csr_matrix(matrix)
    M, K = matrix.shape
    rows = np.repeat(np.arange(M, dtype=np.int64), np.diff(matrix.indptr))
    cols = matrix.indices.astype(np.int64)
    values = matrix.data.astype(np.float32, copy=False)
    if symmetric:
        lower = rows >= cols
        rows, cols, values = rows[lower], cols[lower], values[lower]
    field_name = "pattern" if pattern else "real"
    header = f"%%MatrixMarket matrix coordinate {field_name} {'symmetric' if symmetric else 'general'}\n"
    header += "".join(f"% {line}\n" for line in comment.splitlines())
    header += f"{M} {K} {len(rows)}\n"
    starts = range(0, len(rows), chunk)
    spaces = np.full((min(chunk, len(rows)), 1), ord(" "), np.uint8)
    newlines = np.full((min(chunk, len(rows)), 1), ord("\n"), np.uint8)

    def text(start: int) -> bytes:
        n = min(chunk, len(rows) - start)
        parts = [_digits(rows[start:start + n] + 1), spaces[:n], _digits(cols[start:start + n] + 1)]
        if not pattern:
            parts += [spaces[:n], _float_text(values[start:start + n])]
        lines = np.concatenate([*parts, newlines[:n]], axis=1)
        return lines[lines != 0].tobytes()

    workers = max(1, min(8, os.cpu_count() or 1))
    with open(path, "wb") as f, ThreadPoolExecutor(workers) as pool:  # NumPy lets go of the GIL: chunks in parallel
        f.write(header.encode())
        for wave in range(0, len(starts), workers):  # a wave at a time: a bounded number of chunks in memory
            for piece in pool.map(text, starts[wave:wave + workers]):
                f.write(piece)


def write_matrix(path: Path, matrix: sp.csr_matrix, fmt: str, symmetric: bool = False, pattern: bool = False,
                 comment: str = "") -> Path:
    """`matrix` to `path` (its suffix set by `fmt`): uncompressed .npz, or Matrix Market."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: one of {', '.join(FORMATS)}")
    path = Path(path).with_suffix("." + fmt)
    tmp = path.with_name(path.name + ".part")
    if fmt == "npz":
        with open(tmp, "wb") as f:
            sp.save_npz(f, matrix, compressed=False)
    else:
        write_mtx(tmp, matrix, symmetric=symmetric, pattern=pattern, comment=comment)
    tmp.replace(path)  # a file under its final name is always whole
    return path


def _read_manifest(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}


def write_suite(folder: str | Path, names: Iterable[str] | None = None, fmt: str = "npz", max_nnz: int | None = None,
                min_nnz: int | None = None, overwrite: bool = False,
                on_event: Callable[[str, SuiteMatrix, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Generate the chosen entries (see `select`) and write each to `folder`/<name>.<fmt>, with a manifest
    (suite.json, by file name: class, parameters, seed, shape, nonzeros, seconds) updated file by file. A file already
    there is kept unless `overwrite`. `on_event(kind, entry, info)` hears "start", "generated" and "done"
    (or "kept"). Returns the manifest records of the chosen entries."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: one of {', '.join(FORMATS)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(folder)
    records: list[dict[str, Any]] = []
    notify = on_event or (lambda kind, entry, info: None)
    for entry in select(names, max_nnz, min_nnz):
        path = folder / f"{entry.name}.{fmt}"
        if path.exists() and not overwrite and path.name in manifest.get("matrices", {}):
            record = manifest["matrices"][path.name]
            notify("kept", entry, record)
            records.append(record)
            continue
        notify("start", entry, {})
        start = time.perf_counter()
        matrix = entry.generate()
        generated = time.perf_counter() - start
        notify("generated", entry, {"seconds": generated, "nnz": matrix.nnz})
        comment = f"sparseditto matrix suite: {entry.name}, class {entry.cls}, seed {entry.seed}, params {json.dumps(entry.params)}"
        start = time.perf_counter()
        write_matrix(path, matrix, fmt, symmetric=entry.symmetric, pattern=entry.pattern, comment=comment)
        record = {"name": entry.name, "class": entry.cls, "scale": entry.scale, "seed": entry.seed,
                  "params": {k: list(v) if isinstance(v, tuple) else v for k, v in entry.params.items()},
                  "file": path.name, "format": fmt, "rows": matrix.shape[0], "cols": matrix.shape[1], "nnz": int(matrix.nnz),
                  "symmetric": entry.symmetric, "pattern": entry.pattern and fmt == "mtx",
                  "generate_seconds": round(generated, 3), "write_seconds": round(time.perf_counter() - start, 3),
                  "bytes": path.stat().st_size}
        del matrix
        manifest = _read_manifest(folder)  # another writer may have added entries meanwhile
        manifest.setdefault("matrices", {})[path.name] = record
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        notify("done", entry, record)
        records.append(record)
    return records


# ----------------------------------------------------------------------------------------------- CLI

console = Console()
app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Write the synthetic matrix suite (SuiteSparse-like matrices from seeded generators) to a folder.")


def _count(n: float) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e3 else str(int(n))


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def suite_table(entries: Sequence[SuiteMatrix]) -> RichTable:
    table = RichTable(title=f"{len(entries)} matrices, {len({e.cls for e in entries})} classes")
    table.add_column("name", no_wrap=True)
    table.add_column("class", overflow="fold")
    for header in ("rows x cols", "nnz (est.)", "MB", "L2", "seed"):
        table.add_column(header, justify="right" if header != "L2" else "left")
    table.add_column("parameters", overflow="fold")
    for e in entries:
        M, K, nnz = e.size
        table.add_row(e.name, e.cls, f"{_count(M)} x {_count(K)}", _count(nnz), f"{e.l2_bytes / 2**20:.0f}",
                      "fits" if e.fits_l2 else "", str(e.seed), escape(_params(e.params)))
    return table


@app.command()
def main(
    out_dir: Annotated[Path | None, typer.Argument(help="folder to write the matrices into")] = None,
    names: Annotated[list[str] | None, typer.Option("--names", help="matrices or classes to write (repeat or separate by commas; default: all)")] = None,
    fmt: Annotated[str, typer.Option("--format", help="npz (fast, default) or mtx (Matrix Market)")] = "npz",
    max_nnz: Annotated[int | None, typer.Option(min=1, help="only matrices of at most this many nonzeros (estimated)")] = None,
    min_nnz: Annotated[int | None, typer.Option(min=0, help="only matrices of at least this many nonzeros (estimated)")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="write again the files already in OUT_DIR")] = False,
    list_only: Annotated[bool, typer.Option("--list", help="list the matrices and their sizes; write nothing")] = False,
) -> None:
    try:
        entries = select(names, max_nnz, min_nnz)
        if fmt not in FORMATS:
            raise ValueError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    except ValueError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    if list_only:
        console.print(suite_table(entries))
        return
    if out_dir is None:
        console.print("[red]error:[/] give OUT_DIR (or --list)")
        raise typer.Exit(2)
    if not entries:
        console.print("[yellow]no matrix matches the selection[/]")
        return
    total = sum(e.nnz for e in entries)
    progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                        TextColumn("{task.fields[done]}/{task.fields[count]} matrices"), TimeElapsedColumn(),
                        TimeRemainingColumn(), TextColumn("{task.fields[state]}"), console=console)
    done = 0

    def event(kind: str, entry: SuiteMatrix, info: dict[str, Any]) -> None:
        nonlocal done
        if kind == "start":
            progress.update(task, state=f"generating {entry.name}")
        elif kind == "generated":
            progress.update(task, state=f"writing {entry.name} ({_count(info['nnz'])} nnz, generated in {info['seconds']:.1f} s)")
        else:
            done += 1
            progress.update(task, advance=entry.nnz, done=done, state="")
            how = ("[dim]kept[/]" if kind == "kept" else
                   f"generated {info['generate_seconds']:.1f} s, written {info['write_seconds']:.1f} s")
            console.print(f"  {entry.name}: {info['rows']:,} x {info['cols']:,}, {info['nnz']:,} nnz, {how}")

    with progress:
        task = progress.add_task(f"suite -> {out_dir}", total=total, done=0, count=len(entries), state="")
        records = write_suite(out_dir, entries and [e.name for e in entries], fmt, overwrite=overwrite, on_event=event)
    written = sum(r["bytes"] for r in records)
    console.print(f"{len(records)} matrices in {out_dir} ({written / 2**30:.2f} GiB), manifest {out_dir / MANIFEST}")


if __name__ == "__main__":
    app()
