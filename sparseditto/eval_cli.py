"""`sparseditto eval SUITE ...` and `sparseditto eval --matrices DIR ...` (batch evaluation with a report) and
`sparseditto eval compare A B`."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable
from typer.core import TyperGroup

from sparseditto.errors import EvalError, SparseDittoError
from sparseditto.evals.records import SpecRecord, load_records
from sparseditto.evals.runner import EvalConfig, Evaluation
from sparseditto.evals.suite import FolderSuite, Suite, available_suites, folder_suite, load_suite, matrix_ops, takes_n
from sparseditto.evals.tables import Table
from sparseditto.settings import POLICIES, Settings

console = Console()


class _SuiteOrCommand(TyperGroup):
    """A first word that names no subcommand is a suite: `eval SUITE ...` means `eval run SUITE ...`."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] != "--help":
            args = ["run", *args]
        return super().parse_args(ctx, args)


eval_app = typer.Typer(
    cls=_SuiteOrCommand, no_args_is_help=True,
    help="Run the pipeline over a suite of specs and report correctness, speedups and fast_p: "
         "`sparseditto eval SUITE` (short for `eval run SUITE`, same options), or compare two result sets.",
)


def _fail(exc: SparseDittoError) -> None:
    console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def _parse_gpus(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        gpus = [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        gpus = []
    if not gpus or min(gpus) < 0:
        raise EvalError(f"--gpus {text!r}: give GPU indices separated by commas, e.g. 0,1")
    return gpus


def _failed(record: SpecRecord) -> bool:
    return record.status in ("error", "failed") or record.correctness == "incorrect"


def _outcome(record: SpecRecord) -> str:
    if record.error:
        return f"[red]error[/]: {escape(record.error)}"
    vs = f", {record.speedup_vs_best:.2f}x vs {record.best_baseline}" if record.speedup_vs_best is not None else ""
    colour = "red" if _failed(record) else "green" if record.correct else "yellow"
    return f"[{colour}]{record.status}[/], {record.correctness.replace('_', ' ')}{vs}"


class _Display:
    """Live progress: specs done of all, the ones running, how many failed, elapsed time; one line per finished spec."""

    def __init__(self) -> None:
        self.progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[state]}"), console=console)
        self.task = self.progress.add_task("specs", total=None, state="")
        self.running: dict[int, str] = {}
        self.failed = 0

    def __enter__(self) -> "_Display":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def _state(self) -> str:
        running = ", ".join(self.running.values()) or "-"
        return f"running: {running}  [red]failed: {self.failed}[/]"

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "begin":
            self.progress.update(self.task, total=event["total"], completed=event["skipped"])
            if event["skipped"]:
                console.print(f"resuming: {event['skipped']} of {event['total']} specs already have results")
        elif kind == "started":
            self.running[event["worker"]] = event["spec_id"]
        elif kind == "finished":
            record: SpecRecord = event["record"]
            self.running.pop(event["worker"], None)
            self.failed += _failed(record)
            self.progress.advance(self.task)
            console.print(f"  {record.spec_id}: {_outcome(record)} [dim]({record.seconds:.1f} s)[/]")
        self.progress.update(self.task, state=self._state())


def _rich(table: Table, title: str | None = None) -> RichTable:
    colours = {"better": "green", "worse": "red"}
    out = RichTable(*table.headers, title=title)
    for row in table.rows:
        out.add_row(*[f"[{colours[c]}]{c}[/]" if c in colours else c for c in row])
    return out


def _items(option: str, text: str, allowed: list[str]) -> list[str]:
    """A comma-separated option's values, each once and in the order given, every one of them allowed."""
    items = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    bad = [t for t in items if t not in allowed]
    if not items or bad:
        what = f"unknown {', '.join(map(repr, bad))}; " if bad else ""
        raise EvalError(f"{option} {text!r}: {what}give one or more of {', '.join(allowed)}, separated by commas")
    return items


def _parse_ns(text: str, ops: list[str]) -> list[int]:
    """--n: the dense operand's widths, each a value the spec field N of the operations' families allows."""
    from pydantic import TypeAdapter, ValidationError

    from sparseditto.tools.families import families

    try:
        ns = list(dict.fromkeys(int(t) for t in text.split(",") if t.strip()))
    except ValueError:
        ns = []
    if not ns or min(ns) < 1:
        raise EvalError(f"--n {text!r}: give positive integers separated by commas, e.g. 32,128")
    for family in families().values():
        field = family.spec_model.model_fields.get("N")
        if not takes_n(family.operation) or family.operation not in ops or field is None:
            continue
        check = TypeAdapter(Annotated[field.annotation, field])
        for n in ns:
            try:
                check.validate_python(n)
            except ValidationError as exc:
                why = exc.errors()[0]["msg"].replace("Input should be", "must be", 1)
                raise EvalError(f"--n {n}: N {why} (for {family.operation})") from None
    return ns


def _matrix_suite(matrices: Path, ops: str | None, n: str | None, dtypes: str | None,
                  exclude: list[Path]) -> FolderSuite:
    from sparseditto.spec import SpecBase

    allowed_ops = matrix_ops()
    op_list = _items("--ops", ops, allowed_ops) if ops is not None else allowed_ops
    all_dtypes = list(typing.get_args(SpecBase.model_fields["dtype"].annotation))
    dtype_list = _items("--dtypes", dtypes if dtypes is not None else "fp32", all_dtypes)
    return folder_suite(matrices, op_list, dtype_list, _parse_ns(n if n is not None else "32", op_list), exclude=exclude)


def _announce_folder(scan: FolderSuite, policy: str, folder: Path) -> None:
    used = len(scan.files) - len(scan.skipped)
    console.print(f"suite [bold]{scan.suite.name}[/]: {escape(scan.suite.description)}; {used} matrix files, "
                  f"{len(scan.suite.specs)} specs, policy {policy}, results in {escape(str(folder))}")
    if scan.skipped:
        names = ", ".join(p.name for p, _ in scan.skipped[:5]) + (", ..." if len(scan.skipped) > 5 else "")
        console.print(f"skipped {len(scan.skipped)} dense (array-format) Matrix Market files: {escape(names)}")
    for _, why in scan.refused:
        console.print(f"[yellow]cannot use[/] {escape(why)} (its specs are recorded as errors)", soft_wrap=True)


def _only(suite: Suite, ids: str) -> Suite:
    """The suite cut to the given spec ids, in the suite's order; an unknown id is an error that lists the known."""
    wanted = [i.strip() for i in ids.split(",") if i.strip()]
    known = [s.id for s in suite.specs]
    unknown = [i for i in wanted if i not in known]
    if not wanted or unknown:
        raise EvalError(f"--only {ids!r}: {'no spec id given' if not wanted else 'unknown ' + ', '.join(unknown)}; "
                        f"the suite's ids: {', '.join(known)}")
    return suite.model_copy(update={"specs": [s for s in suite.specs if s.id in wanted]})


@eval_app.command("run")
def run_cmd(
    suite: Annotated[str | None, typer.Argument(
        help=f"a suite name ({', '.join(available_suites())}) or a suite YAML file; or give --matrices DIR")] = None,
    matrices: Annotated[Path | None, typer.Option(
        help="evaluate every matrix file (.mtx, .mtx.gz, .npz) in this folder and its subfolders instead of a suite")] = None,
    ops: Annotated[str | None, typer.Option(help="with --matrices: operations, e.g. spmv,spmm (default: every one that runs on a matrix file)")] = None,
    n: Annotated[str | None, typer.Option("--n", help="with --matrices: N, the dense operand's columns (spmm), e.g. 32,128 (default 32)")] = None,
    dtypes: Annotated[str | None, typer.Option(help="with --matrices: dtypes, e.g. fp32,fp16 (default fp32)")] = None,
    policy: Annotated[str | None, typer.Option(help="agent policy: offline | llm | hybrid (default: SPARSEDITTO_POLICY or offline)")] = None,
    budget: Annotated[int | None, typer.Option(min=1, help="iteration budget per spec (default: each spec's own)")] = None,
    workers: Annotated[int, typer.Option(min=1, help="worker processes when no GPU is used (compile-only)")] = 1,
    gpus: Annotated[str | None, typer.Option(help="GPUs to use, one worker each, e.g. 0,1")] = None,
    out: Annotated[Path | None, typer.Option(help="output folder (default: <runs dir>/eval/<suite>)")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="continue an interrupted evaluation in --out")] = False,
    compile_only: Annotated[bool, typer.Option("--compile-only", help="compile and analyse only; use no GPU")] = False,
    only: Annotated[str | None, typer.Option(help="run only these spec ids of the suite, e.g. sparse24_fp16_8192,sparse24_fp16_decode")] = None,
) -> None:
    """Run the pipeline on every spec of SUITE (or of the matrix files in --matrices DIR, one spec per file,
    operation, dtype and N); write results.jsonl, report.md and report.html to --out."""
    from sparseditto.evals.metrics import summarize
    from sparseditto.evals.report import fast_p_table, write_reports

    settings = Settings()
    policy = policy or settings.policy
    scan: FolderSuite | None = None
    try:
        if (suite is None) == (matrices is None):
            raise EvalError("give a SUITE or --matrices DIR" + (", not both" if suite is not None else ""))
        if matrices is None and (ops, n, dtypes) != (None, None, None):
            raise EvalError("--ops, --n and --dtypes go with --matrices DIR (a suite's specs name their own)")
        if policy not in POLICIES:
            raise EvalError(f"--policy {policy!r}: allowed: {', '.join(POLICIES)}")
        if matrices is not None:
            scan = _matrix_suite(matrices, ops, n, dtypes, exclude=[p for p in (out, Path(settings.runs_dir)) if p])
            loaded = scan.suite
        else:
            loaded = load_suite(suite)  # type: ignore[arg-type]
        if only is not None:
            loaded = _only(loaded, only)
        folder = out or Path(settings.runs_dir) / "eval" / loaded.name
        config = EvalConfig(policy=policy, budget=budget, compile_only=compile_only or settings.compile_only,  # type: ignore[arg-type]
                            workers=workers, gpus=_parse_gpus(gpus), out=folder)
        evaluation = Evaluation(loaded, config, resume=resume)
    except SparseDittoError as exc:
        _fail(exc)
    if scan is not None:
        _announce_folder(scan, policy, folder)
    else:
        console.print(f"suite [bold]{loaded.name}[/]: {len(loaded.specs)} specs, policy {policy}, results in {folder}")
    try:
        with _Display() as display:
            records = evaluation.run(on_event=display)
    except SparseDittoError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        done = len(evaluation.records)
        console.print(f"[yellow]interrupted[/]: {done} of {len(loaded.specs)} specs recorded in {evaluation.results.path}; "
                      "run the same command with --resume to finish")
        raise typer.Exit(130) from None
    md, page = write_reports(loaded.name, records, folder)
    console.print(_rich(fast_p_table(summarize(records)), title="fast_p and geometric-mean speedup"))
    console.print(f"report: {md}, {page}")


@eval_app.command("compare")
def compare_cmd(
    a: Annotated[str, typer.Argument(help="result set A: an eval output folder or its results.jsonl")],
    b: Annotated[str, typer.Argument(help="result set B, compared against A")],
    markdown: Annotated[Path | None, typer.Option(help="also write the comparison as Markdown to this file")] = None,
    tolerance: Annotated[float, typer.Option(min=0.0, help="relative change below which a spec is 'same'")] = 0.03,
) -> None:
    """Show A and B side by side: which specs got better or worse."""
    from sparseditto.evals.compare import changes_table, compare_markdown, compare_records, totals_table

    try:
        ra, rb = load_records(a), load_records(b)
    except SparseDittoError as exc:
        _fail(exc)
    changes = compare_records(ra, rb, tolerance)
    totals = totals_table(ra, rb)
    console.print(_rich(totals, title=f"A = {a}, B = {b}"))
    console.print(_rich(changes_table(changes)))
    if markdown:
        markdown.write_text(compare_markdown(a, b, changes, totals))
        console.print(f"written: {markdown}")
