"""The `sparseditto` command: run a spec, answer the approval gate, list and take up runs, check the machine."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Annotated, Any

import structlog
import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.prompt import Prompt
from rich.table import Table

from sparseditto.artifacts import list_runs
from sparseditto.errors import SparseDittoError
from sparseditto.eval_cli import eval_app
from sparseditto.kb_cli import kb_app
from sparseditto.graph.gate import MAX_EXTEND, read_answer
from sparseditto.logging_setup import configure_logging
from sparseditto.pipeline import PipelineResult, resume, run_pipeline
from sparseditto.settings import ON_BUDGET, Settings
from sparseditto.spec import load_spec

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Sparse operation + sparsity pattern -> a validated, benchmarked CUDA kernel.")
app.add_typer(kb_app, name="kb")
console = Console()
app.add_typer(eval_app, name="eval")


class Progress:
    """Shows the graph's progress events as they arrive."""

    def __init__(self) -> None:
        self.status = console.status("starting")

    def __enter__(self) -> "Progress":
        self.status.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.status.__exit__(*exc)

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "started":
            console.print(f"[bold]run[/] {event['run_id']} [dim]({event['folder']})[/]")
        elif kind == "candidate" and event.get("origin") == "llm":
            self.status.update(f"iteration {event['iteration']}: the model wrote {event['label']}")
        elif kind == "planned":
            console.print(f"[bold]plan[/]: {', '.join(event['strategies'])}")
        elif kind == "retrieved" and event.get("reuse"):
            console.print(f"[bold]experience[/]: re-validating the kernel stored for this problem: {event['reuse']['kernel']}")
        elif kind == "verifying":
            self.status.update(f"iteration {event['iteration']}: verifying {event['label']} ({event['backend']})")
        elif kind == "verified":
            console.print(f"  [cyan]#{event['iteration']}[/] {event['label']}: {event['outcome']} [dim]({event['seconds']} s)[/]")
        elif kind == "reviewed" and event["decision"] == "revise":
            self.status.update(f"reviewer: {event['direction']}")
        elif kind == "finished":
            self.status.update("done")


def _show(result: PipelineResult) -> None:
    table = Table(show_header=False, box=None)
    table.add_row("run", result.run_id)
    table.add_row("status", f"[bold]{result.status}[/]")
    table.add_row("iterations", str(result.iterations))
    if result.best:
        table.add_row("best kernel", result.best["candidate"])
        m = result.best.get("measurement")
        if m:
            vs = f", {m['speedup_vs_best']:.2f}x vs {m['best_baseline']}" if m.get("speedup_vs_best") else ""
            table.add_row("time", f"{m['median_us']:.1f} us ({m['bandwidth_fraction']:.0%} of the bandwidth floor{vs})")
    if result.tokens:
        table.add_row("LLM tokens", f"{result.tokens.get('total', 0)} ({result.tokens.get('prompt', 0)} prompt, "
                      f"{result.tokens.get('completion', 0)} completion), ${result.cost_usd:.4f} ({result.policy} policy)")
    if result.artifacts_dir:
        table.add_row("artifacts", result.artifacts_dir)
    console.print(table)


def _ask_gate(result: PipelineResult, runs_dir: str, compile_only: bool, llm: dict[str, Any] | None = None) -> PipelineResult:
    """On a terminal, answer the approval gate right here until the run finishes; an answer the gate cannot
    read is refused with the reason and asked again."""
    while result.status == "awaiting_approval" and sys.stdin.isatty():
        gate = result.gate or {}
        console.print(f"[yellow]{gate.get('reason')}[/]: {gate.get('why_not_accepted')}")
        if gate.get("best"):
            console.print(f"best so far: {gate['best']['candidate']}: {gate['best']['outcome']}")
        if gate.get("retry"):
            console.print(f"[red]last answer refused:[/] {gate['retry']}")
        answer = Prompt.ask(f"approve, extend N (1 to {MAX_EXTEND}), or abort", default="approve")
        while read_answer(answer)[0] is None:
            console.print(f"[red]refused:[/] {read_answer(answer)[1]}")
            answer = Prompt.ask(f"approve, extend N (1 to {MAX_EXTEND}), or abort", default="approve")
        with Progress() as progress:
            result = resume(result.run_id, answer, runs_dir=runs_dir, compile_only=compile_only, on_event=progress, llm=llm)
    if result.status == "awaiting_approval":
        console.print(f"waiting at the approval gate: sparseditto resume {result.run_id} --approve | --extend N | --abort")
    return result


def _llm_options(**options: Any) -> dict[str, Any]:
    """The LLM options given on the command line, as run_pipeline's `llm` overrides."""
    return {f"llm_{name}": value for name, value in options.items() if value is not None}


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="debug logs on stderr")] = False) -> None:
    configure_logging(verbose)
    try:
        Settings()  # a bad SPARSEDITTO_* variable: one line naming it, whatever the command
    except SparseDittoError as exc:
        _fail(exc)


def _fail(exc: SparseDittoError) -> None:
    """A user's mistake (spec, option, setting, run id): one unwrapped line naming the field, the file or the
    variable, the user's text escaped; its exit code (2)."""
    field = getattr(exc, "field", None)
    text = str(exc)
    if field and text.startswith(f"{field}:"):
        text = f"spec field '{field}':{text[len(field) + 1:]}"
    console.print(f"[red]error:[/] {escape(text)}", soft_wrap=True, highlight=False)
    raise typer.Exit(exc.exit_code)


@app.command()
def run(
    spec: Annotated[str, typer.Argument(help="spec file (YAML or JSON)")],
    budget: Annotated[int | None, typer.Option(min=1, help="iteration budget (overrides the spec)")] = None,
    on_budget: Annotated[str | None, typer.Option(help="when the budget is spent: ask | approve | abort")] = None,
    runs_dir: Annotated[str | None, typer.Option(help="where runs and checkpoints are kept")] = None,
    compile_only: Annotated[bool, typer.Option("--compile-only", help="do not use the GPU even if one is found")] = False,
    policy: Annotated[str | None, typer.Option(help="agent policy: offline | llm | hybrid")] = None,
    model: Annotated[str | None, typer.Option(help="LLM model for every role (SPARSEDITTO_LLM_MODEL)")] = None,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint (SPARSEDITTO_LLM_BASE_URL)")] = None,
    output_method: Annotated[str | None, typer.Option(help="structured output: json_schema | function_calling | json_mode")] = None,
    token_budget: Annotated[int | None, typer.Option(min=1, help="LLM tokens the run may spend")] = None,
    cost_budget: Annotated[float | None, typer.Option(help="LLM cost in USD the run may spend")] = None,
) -> None:
    """Plan, write, verify and benchmark kernels for SPEC until one is accepted or the budget is spent."""
    try:
        settings = Settings()
        loaded = load_spec(spec)  # every bad spec ends here, before anything is started
    except SparseDittoError as exc:
        _fail(exc)
    when_spent = on_budget or settings.on_budget
    if when_spent not in ON_BUDGET:
        _fail(SparseDittoError(f"--on-budget: {when_spent!r} is not one of {', '.join(ON_BUDGET)}"))
    folder = runs_dir or settings.runs_dir
    llm = _llm_options(model=model, base_url=base_url, output_method=output_method, token_budget=token_budget,
                       cost_budget_usd=cost_budget)
    try:
        with Progress() as progress:
            result = run_pipeline(loaded, on_budget=when_spent, budget=budget, runs_dir=folder,  # type: ignore[arg-type]
                                  compile_only=compile_only or settings.compile_only, on_event=progress,
                                  policy=policy or settings.policy, llm=llm)  # type: ignore[arg-type]
        result = _ask_gate(result, folder, compile_only or settings.compile_only, llm)
    except SparseDittoError as exc:
        _fail(exc)
    _show(result)


@app.command(name="resume")
def resume_cmd(
    run_id: Annotated[str, typer.Argument(help="the run: waiting at the approval gate, or stopped by a crash or a kill")],
    approve: Annotated[bool, typer.Option("--approve", help="accept the best kernel so far")] = False,
    extend: Annotated[int | None, typer.Option("--extend", min=1, max=MAX_EXTEND,
                                               help=f"search N more iterations (1 to {MAX_EXTEND})")] = None,
    abort: Annotated[bool, typer.Option("--abort", help="stop without accepting (a crashed run: end it as it is)")] = False,
    runs_dir: Annotated[str | None, typer.Option(help="where runs and checkpoints are kept")] = None,
    compile_only: Annotated[bool, typer.Option("--compile-only")] = False,
    policy: Annotated[str | None, typer.Option(help="change the agent policy: offline | llm | hybrid (default: the run's own)")] = None,
    model: Annotated[str | None, typer.Option(help="LLM model for every role (SPARSEDITTO_LLM_MODEL)")] = None,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint (SPARSEDITTO_LLM_BASE_URL)")] = None,
) -> None:
    """Answer a run's approval gate; with no answer, continue a run stopped by a crash or a kill."""
    chosen = [a for a, on in (("approve", approve), (f"extend {extend}", extend is not None), ("abort", abort)) if on]
    if len(chosen) > 1:
        _fail(SparseDittoError("give at most one of --approve, --extend N, --abort"))
    folder = runs_dir or Settings().runs_dir
    llm = _llm_options(model=model, base_url=base_url)
    try:
        with Progress() as progress:
            result = resume(run_id, chosen[0] if chosen else None, runs_dir=folder, compile_only=compile_only,
                            on_event=progress, policy=policy, llm=llm)  # type: ignore[arg-type]
        result = _ask_gate(result, folder, compile_only, llm)
    except SparseDittoError as exc:
        _fail(exc)
    _show(result)


def _when(iso: str | None) -> str:
    """An ISO time from a status file, in local time."""
    try:
        return datetime.fromisoformat(iso).astimezone().strftime("%m-%d %H:%M") if iso else "-"
    except ValueError:
        return iso or "-"


def _detail(run: dict[str, Any]) -> str:
    state = run["state"]
    if state in ("interrupted", "running"):
        where = f"after {run['node']}" if run.get("node") else "starting"
        return f"{where} at {_when(run.get('updated'))} (pid {run.get('pid', '?')})"
    if state == "failed":
        return run.get("error", "")
    if state == "waiting_for_approval":
        return run.get("gate") or "budget spent"
    return run.get("result") or run.get("note") or ""


@app.command(name="runs")
def runs_cmd(
    runs_dir: Annotated[str | None, typer.Option(help="where runs and checkpoints are kept")] = None,
) -> None:
    """List the runs with their state; a run whose process died (killed, crashed) shows as interrupted."""
    folder = runs_dir or Settings().runs_dir
    try:
        runs = list_runs(folder)
    except SparseDittoError as exc:
        _fail(exc)
    if not runs:
        console.print(f"no runs in {folder}")
        return
    table = Table(title=f"runs in {folder}", box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    table.add_column("run", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("spec", min_width=9)
    table.add_column("started", no_wrap=True)
    table.add_column("detail", min_width=12)
    colors = {"running": "cyan", "interrupted": "red", "failed": "red", "waiting_for_approval": "yellow",
              "done": "green", "aborted": "dim"}
    for run in runs:
        color = colors.get(run["state"], "white")
        table.add_row(run["run_id"], f"[{color}]{run['state']}[/]", escape(run.get("spec") or "-"),
                      _when(run.get("started")), escape(_detail(run)))
    console.print(table)
    states = {run["state"] for run in runs}
    if states & {"interrupted", "failed"}:
        console.print("interrupted or failed: [bold]sparseditto resume ID[/] continues it from its last checkpoint, "
                      "[bold]sparseditto resume ID --abort[/] ends it as it is")
    if "waiting_for_approval" in states:
        console.print("waiting_for_approval: [bold]sparseditto resume ID --approve | --extend N | --abort[/]")


def _endpoint(settings: Settings) -> str:
    """The LLM endpoint, its models per role, and whether it answers a one-token request."""
    from sparseditto.agents.llm_models import ping

    if not settings.llm_base_url and not settings.llm_api_key:
        return "not set (SPARSEDITTO_LLM_BASE_URL, or OPENAI_API_KEY for OpenAI): offline expert policy"
    where = settings.llm_base_url or "OpenAI (api.openai.com)"
    models = {role: settings.model_for(role) for role in ("planner", "coder", "reviewer")}
    if not models["coder"]:
        return f"{where}: no model set (SPARSEDITTO_LLM_MODEL)"
    names = models["coder"] if len(set(models.values())) == 1 else ", ".join(f"{r} {m}" for r, m in models.items())
    return f"{where} ({names}): {ping(settings)}"


@app.command()
def doctor() -> None:
    """What this machine offers: GPU, NVRTC, nvcc, Nsight Compute, compute-sanitizer, PyTorch, LLM endpoint."""
    from sparseditto.tools.baselines import available_libraries
    from sparseditto.tools.compiler import toolchain
    from sparseditto.tools.device import detect
    from sparseditto.tools.sass import find_disassembler

    facts = detect()
    settings = Settings()
    libs = available_libraries()
    table = Table("component", "found")
    table.add_row("GPU", f"{facts.gpu['name']} ({facts.gpu['arch']}, {facts.gpu['sms']} SMs)" if facts.gpu
                  else f"none ({facts.gpu_error or 'no device'}): compile-only mode")
    for name, found in toolchain().items():
        table.add_row(name, found or "not found")
    table.add_row("nvdisasm (SASS mix)", find_disassembler() or "not found: static SASS analysis not executed")
    for name, path in (("nvcc", facts.nvcc), ("ncu", facts.ncu), ("compute-sanitizer", facts.compute_sanitizer)):
        table.add_row(name, path or "not on PATH")
    for name, version in libs.items():
        table.add_row(name, version)
    table.add_row("LLM endpoint", _endpoint(settings))
    console.print(table)
    structlog.get_logger(__name__).debug("doctor", gpu=facts.gpu)


if __name__ == "__main__":
    app()
