"""Recall@k and MRR of the knowledge-base search over labelled queries (queries.yaml).

recall@k of a query is the share of its relevant chunks found in the top k; hit@k whether at least one
is; the reciprocal rank is 1 / the rank of the first relevant chunk within the top `MRR_DEPTH`
(0 when none is). Each is averaged over the queries.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel

from sparseditto.knowledge_base.index import load_index
from sparseditto.knowledge_base.retrieval import Filters, search

QUERIES_FILE = Path(__file__).parent / "queries.yaml"
MRR_DEPTH = 10


class LabelledQuery(BaseModel):
    query: str
    role: str
    relevant: list[str]
    filters: Filters = Filters()


class QueryResult(BaseModel):
    query: str
    role: str
    relevant: list[str]
    retrieved: list[str]
    recall: float
    hit: bool
    reciprocal_rank: float


class Evaluation(BaseModel):
    k: int
    queries: int
    recall: float
    hit_rate: float
    mrr: float
    results: list[QueryResult]

    def misses(self) -> list[QueryResult]:
        return [r for r in self.results if r.recall < 1.0]

    def by_role(self) -> dict[str, tuple[int, float, float, float]]:
        """Per asking role: queries, recall@k, hit@k, MRR."""
        out = {}
        for role in sorted({r.role for r in self.results}):
            rs = [r for r in self.results if r.role == role]
            out[role] = (len(rs), sum(r.recall for r in rs) / len(rs), sum(r.hit for r in rs) / len(rs),
                         sum(r.reciprocal_rank for r in rs) / len(rs))
        return out


def load_queries(path: Path = QUERIES_FILE) -> list[LabelledQuery]:
    return [LabelledQuery.model_validate(q) for q in yaml.safe_load(path.read_text())["queries"]]


def unknown_labels(queries: list[LabelledQuery]) -> list[str]:
    """Labels that name no chunk of the index (a renamed heading would otherwise count as a miss)."""
    ids = {c.id for c in load_index().chunks}
    return sorted({label for q in queries for label in q.relevant if label not in ids})


def evaluate(queries: list[LabelledQuery], k: int = 5) -> Evaluation:
    results = []
    for q in queries:
        ranked = [h.id for h in search(q.query, q.filters, k=max(k, MRR_DEPTH))]
        top = set(ranked[:k])
        first = next((i + 1 for i, cid in enumerate(ranked) if cid in q.relevant), None)
        results.append(QueryResult(query=q.query, role=q.role, relevant=q.relevant, retrieved=ranked[:k],
                                   recall=len(top & set(q.relevant)) / len(q.relevant), hit=bool(top & set(q.relevant)),
                                   reciprocal_rank=1.0 / first if first else 0.0))
    n = len(results)
    return Evaluation(k=k, queries=n, recall=sum(r.recall for r in results) / n, hit_rate=sum(r.hit for r in results) / n,
                      mrr=sum(r.reciprocal_rank for r in results) / n, results=results)
