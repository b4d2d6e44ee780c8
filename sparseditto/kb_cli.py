"""`sparseditto kb`: search, list and check the knowledge base from a shell."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sparseditto.errors import KnowledgeBaseError, SparseDittoError, shown
from sparseditto.evals.retrieval.evaluate import evaluate, load_queries
from sparseditto.knowledge_base.chunks import all_chunks, doc_pages, page_title
from sparseditto.knowledge_base.experience import ExperienceStore, experience_path
from sparseditto.knowledge_base.index import cache_root, current_folder, load_index
from sparseditto.knowledge_base.library import reference_kernels
from sparseditto.knowledge_base.retrieval import Filters, has_searchable_words, search
from sparseditto.settings import Settings
from sparseditto.tools.dtypes import VALUE_DTYPES as DTYPES

kb_app = typer.Typer(no_args_is_help=True, help="Search and inspect the knowledge base (docs, reference kernels, experience).")
console = Console()


def _check_filters(family: str | None, arch: str | None, dtype: str | None) -> Filters:
    families = sorted({k.family for k in reference_kernels()} | {f for c in all_chunks() for f in c.families})
    if family and family not in families:
        raise KnowledgeBaseError(f"--family: unknown family {family!r}; known: {', '.join(families)}")
    if arch and not (arch.startswith("sm_") and arch[3:].rstrip("a").isdigit()):
        raise KnowledgeBaseError(f"--arch: {arch!r} is not an architecture like sm_80, sm_90 or sm_90a")
    if dtype and dtype not in DTYPES:
        raise KnowledgeBaseError(f"--dtype: {dtype!r} is not one of {', '.join(DTYPES)}")
    return Filters(family=family, arch=arch, dtype=dtype)


@kb_app.command("search")
def search_cmd(
    query: Annotated[str, typer.Argument(help="what to look for, in words or CUDA identifiers")],
    family: Annotated[str | None, typer.Option(help="only chunks for this problem family (csr_spmm, ...)")] = None,
    arch: Annotated[str | None, typer.Option(help="only chunks that apply on this architecture (sm_80, sm_90a, ...)")] = None,
    dtype: Annotated[str | None, typer.Option(help="only chunks for this dtype (fp32, fp16, bf16)")] = None,
    k: Annotated[int, typer.Option("-k", min=1, max=50, help="how many results")] = 5,
    full: Annotated[bool, typer.Option("--full", help="print each passage whole")] = False,
) -> None:
    """The best-matching doc sections and reference kernels, with their BM25 scores."""
    try:
        if not has_searchable_words(query):
            raise KnowledgeBaseError(f"the query has no searchable words (got {shown(query)}): give words or "
                                     "identifiers beyond stopwords such as 'the' or 'of'")
        hits = search(query, _check_filters(family, arch, dtype), k=k)
    except SparseDittoError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
        raise typer.Exit(exc.exit_code) from None
    if not hits:
        console.print("no matching passage")
        return
    table = Table("#", "score", "passage", show_lines=True)
    for i, hit in enumerate(hits, 1):
        body = hit.text.split("\n", 1)[-1].replace("\n", " ")
        excerpt = body if full or len(body) <= 240 else body[:240] + "..."
        table.add_row(str(i), f"{hit.score:.2f}", f"[bold]{hit.id}[/] [dim]{hit.source}[/]\n{excerpt}")
    console.print(table)


@kb_app.command("list")
def list_cmd() -> None:
    """Every reference kernel and doc page."""
    kernels = Table("kernel", "family", "strategy", "dtypes", "archs", "measured (speedup vs best baseline)", title="reference kernels")
    for k in reference_kernels():
        measured = "\n".join(f"{m.spec}: {m.speedup}x" for m in k.measured) or "-"
        kernels.add_row(k.name, k.family, k.strategy, ", ".join(k.dtypes), ", ".join(k.archs), measured)
    console.print(kernels)
    chunks = all_chunks()
    docs = Table("page", "title", "sections", title="docs")
    for page in doc_pages():
        sections = sum(1 for c in chunks if c.source.endswith("/" + page.name))
        docs.add_row(page.name, page_title(page), str(sections))
    console.print(docs)


@kb_app.command("stats")
def stats_cmd(runs_dir: Annotated[str | None, typer.Option(help="where runs (and by default the experience store) are kept")] = None) -> None:
    """Sizes of the knowledge base, the index cache and whether it is fresh, the experience entries."""
    folder = current_folder()
    fresh = folder.is_dir()
    index = load_index()
    store_path = experience_path(runs_dir or Settings().runs_dir)
    table = Table(show_header=False, box=None)
    table.add_row("doc pages", str(len(doc_pages())))
    table.add_row("chunks", f"{len(index.chunks)} ({sum(c.kind == 'doc' for c in index.chunks)} doc sections, "
                            f"{sum(c.kind == 'kernel' for c in index.chunks)} kernels)")
    table.add_row("reference kernels", str(len(reference_kernels())))
    table.add_row("experience entries", f"{ExperienceStore(store_path).count()} ({store_path})")
    table.add_row("index cache", str(cache_root()))
    table.add_row("index", f"{folder.name}: " + ("fresh (loaded from the cache)" if fresh else "rebuilt now (the knowledge base changed or no cache)"))
    console.print(table)


@kb_app.command("eval")
def eval_cmd(k: Annotated[int, typer.Option("-k", min=1, max=50, help="cut-off for recall and hit rate")] = 5) -> None:
    """Recall@k, hit@k and MRR of the search over the labelled queries (evals/retrieval/queries.yaml)."""
    result = evaluate(load_queries(), k=k)
    table = Table("role", "queries", f"recall@{k}", f"hit@{k}", "MRR@10")
    for role, (n, recall, hit, mrr) in result.by_role().items():
        table.add_row(role, str(n), f"{recall:.3f}", f"{hit:.3f}", f"{mrr:.3f}")
    table.add_row("[bold]all[/]", str(result.queries), f"{result.recall:.3f}", f"{result.hit_rate:.3f}", f"{result.mrr:.3f}")
    console.print(table)
    for miss in result.misses():
        console.print(f"[yellow]recall {miss.recall:.2f}[/] {miss.query}: wanted {', '.join(miss.relevant)}; got {', '.join(miss.retrieved)}")
