"""`sparseditto eval SUITE ...` (batch evaluation with a report) and `sparseditto eval compare A B`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable
from typer.core import TyperGroup

from sparseditto.errors import EvalError, SparseDittoError
from sparseditto.evals.records import SpecRecord, load_records
from sparseditto.evals.runner import EvalConfig, Evaluation
from sparseditto.evals.suite import available_suites, load_suite
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
    console.print(f"[red]error:[/] {exc}")
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
        return f"[red]error[/]: {record.error}"
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


@eval_app.command("run")
def run_cmd(
    suite: Annotated[str, typer.Argument(help=f"a suite name ({', '.join(available_suites())}) or a suite YAML file")],
    policy: Annotated[str | None, typer.Option(help="agent policy: offline | llm | hybrid (default: SPARSEDITTO_POLICY or offline)")] = None,
    budget: Annotated[int | None, typer.Option(min=1, help="iteration budget per spec (default: each spec's own)")] = None,
    workers: Annotated[int, typer.Option(min=1, help="worker processes when no GPU is used (compile-only)")] = 1,
    gpus: Annotated[str | None, typer.Option(help="GPUs to use, one worker each, e.g. 0,1")] = None,
    out: Annotated[Path | None, typer.Option(help="output folder (default: <runs dir>/eval/<suite>)")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="continue an interrupted evaluation in --out")] = False,
    compile_only: Annotated[bool, typer.Option("--compile-only", help="compile and analyse only; use no GPU")] = False,
) -> None:
    """Run the pipeline on every spec of SUITE; write results.jsonl, report.md and report.html to --out."""
    from sparseditto.evals.metrics import summarize
    from sparseditto.evals.report import fast_p_table, write_reports

    settings = Settings()
    policy = policy or settings.policy
    try:
        loaded = load_suite(suite)
        if policy not in POLICIES:
            raise EvalError(f"--policy {policy!r}: allowed: {', '.join(POLICIES)}")
        folder = out or Path(settings.runs_dir) / "eval" / loaded.name
        config = EvalConfig(policy=policy, budget=budget, compile_only=compile_only or settings.compile_only,  # type: ignore[arg-type]
                            workers=workers, gpus=_parse_gpus(gpus), out=folder)
        evaluation = Evaluation(loaded, config, resume=resume)
    except SparseDittoError as exc:
        _fail(exc)
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
