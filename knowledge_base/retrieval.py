"""Search the knowledge base: BM25 scores, metadata filters, then a re-ranking by match with the plan.

Filters drop chunks that cannot apply (a kernel of another family, an sm_90a instruction for an sm_80
target, a dtype the kernel lacks); chunks without such metadata apply everywhere and always pass.
The re-ranking multiplies a BM25 score by 1 + 0.2 per point of agreement with the plan (operation,
format, dtype, family, and the plan's strategy kernels named in the chunk), so that among passages
of similar text relevance the ones about this very problem come first, while a strong text match
still beats a weak one.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from sparseditto.knowledge_base.chunks import Chunk
from sparseditto.knowledge_base.index import load_index
from sparseditto.knowledge_base.library import runs_on
from sparseditto.knowledge_base.tokenizer import tokenize

RERANK_WEIGHT = 0.2


class Filters(BaseModel):
    family: str | None = None
    arch: str | None = None
    dtype: str | None = None

    def admits(self, chunk: Chunk) -> bool:
        if self.family and chunk.families and self.family not in chunk.families:
            return False
        if self.dtype and chunk.dtypes and self.dtype not in chunk.dtypes:
            return False
        return not (self.arch and chunk.archs and not runs_on(self.arch, chunk.archs))


class PlanMatch(BaseModel):
    """What the plan is about, for the re-ranking."""

    operation: str | None = None
    format: str | None = None
    dtype: str | None = None
    family: str | None = None
    kernels: list[str] = []

    def points(self, chunk: Chunk) -> int:
        pts = sum(1 for value, values in ((self.operation, chunk.operations), (self.format, chunk.formats),
                                          (self.dtype, chunk.dtypes), (self.family, chunk.families))
                  if value and value in values)
        return pts + sum(2 for k in self.kernels if k in chunk.text)


class Hit(BaseModel):
    id: str
    kind: str
    title: str
    source: str
    score: float
    text: str


def has_searchable_words(query: str) -> bool:
    """Whether the query has a word BM25 can score: not empty, not only stopwords or punctuation."""
    return bool(tokenize(query))


def search(query: str, filters: Filters | None = None, k: int = 5, plan: PlanMatch | None = None) -> list[Hit]:
    """The k best chunks for `query` that pass `filters`, re-ranked by `plan` when given; none for a query
    without a searchable word (empty, or stopwords only: `has_searchable_words`)."""
    tokens = tokenize(query)
    if not tokens:
        return []
    index = load_index()
    scores = index.bm25.get_scores(tokens)
    filters = filters or Filters()
    keep = np.array([filters.admits(c) for c in index.chunks])
    scores = np.where(keep, scores, 0.0)
    if plan is not None:
        scores = scores * np.array([1.0 + RERANK_WEIGHT * plan.points(c) for c in index.chunks])
    order = [int(i) for i in np.argsort(-scores, kind="stable") if scores[i] > 0][:k]
    return [Hit(id=index.chunks[i].id, kind=index.chunks[i].kind, title=index.chunks[i].title,
                source=index.chunks[i].source, score=round(float(scores[i]), 3), text=index.chunks[i].text)
            for i in order]
