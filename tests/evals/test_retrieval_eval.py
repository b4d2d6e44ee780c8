"""The retrieval evaluation: labelled queries, recall@5 at least 0.9, MRR reported."""

from __future__ import annotations

import pytest

from sparseditto.evals.retrieval.evaluate import evaluate, load_queries, unknown_labels


@pytest.fixture(autouse=True)
def kb_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SPARSEDITTO_KB_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kb-cache"))


def test_queries_are_many_varied_and_name_real_chunks():
    queries = load_queries()
    assert len(queries) >= 40
    assert {q.role for q in queries} == {"planner", "coder", "reviewer"}
    assert unknown_labels(queries) == []


def test_recall_at_5(capsys):
    result = evaluate(load_queries(), k=5)
    with capsys.disabled():
        print(f"\nretrieval: {result.queries} queries, recall@5 {result.recall:.3f}, hit@5 {result.hit_rate:.3f}, "
              f"MRR@10 {result.mrr:.3f}")
    assert result.recall >= 0.9, [(r.query, r.retrieved) for r in result.misses()]


def test_metrics_count_what_they_should():
    query = load_queries()[0].model_copy(update={"query": "cusparseLtMatmulSearch",
                                                 "relevant": ["cusparselt_workflow#algorithm-search", "no-such-chunk"]})
    result = evaluate([query], k=5)
    assert result.recall == 0.5 and result.hit_rate == 1.0 and result.mrr == 1.0
    assert evaluate([query.model_copy(update={"relevant": ["no-such-chunk"]})], k=5).mrr == 0.0
