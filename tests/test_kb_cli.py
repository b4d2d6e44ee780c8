"""`sparseditto kb search | list | stats` through typer's CliRunner."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sparseditto.cli import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def kb_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSEDITTO_KB_CACHE_DIR", str(tmp_path / "kb-cache"))
    monkeypatch.setenv("COLUMNS", "200")


def test_search_shows_scored_passages():
    out = runner.invoke(app, ["kb", "search", "2:4 metadata layout for bf16", "-k", "2"])
    assert out.exit_code == 0, out.output
    assert "sparse_mma_2_4#metadata-layout-for-fp16-and-bf16" in out.output
    assert "score" in out.output


def test_search_filters_and_bad_filters():
    out = runner.invoke(app, ["kb", "search", "split long rows into chunks", "--family", "csr_spmv", "-k", "10"])
    assert out.exit_code == 0 and "kernel:spmm" not in out.output and "spmv" in out.output
    for args, word in ((["--family", "csr_nope"], "unknown family"), (["--arch", "ampere"], "not an architecture"),
                       (["--dtype", "int4"], "not one of")):
        bad = runner.invoke(app, ["kb", "search", "x", *args])
        assert bad.exit_code == 2 and word in bad.output and "Traceback" not in bad.output


def test_list_shows_kernels_and_docs():
    out = runner.invoke(app, ["kb", "list"])
    assert out.exit_code == 0
    for name in ("spmm_csr_rowsplit", "spmv_csr_split_vec4", "cusparselt_workflow.md", "nsight_compute.md", "1.13x"):
        assert name in out.output


def test_stats_reports_cache_freshness_and_experience(tmp_path):
    first = runner.invoke(app, ["kb", "stats", "--runs-dir", str(tmp_path / "runs")])
    assert first.exit_code == 0 and "rebuilt now" in first.output
    assert "experience entries" in first.output and "0 (" in first.output
    second = runner.invoke(app, ["kb", "stats", "--runs-dir", str(tmp_path / "runs")])
    assert "fresh (loaded from the cache)" in second.output


def test_eval_prints_recall_and_mrr_per_role():
    out = runner.invoke(app, ["kb", "eval"])
    assert out.exit_code == 0
    for word in ("recall@5", "MRR@10", "planner", "coder", "reviewer", "all"):
        assert word in out.output


@pytest.mark.parametrize("query", ["", "   ", "the of and", "what is the", "?!"])
def test_a_query_without_searchable_words_is_a_one_line_error(query):
    from sparseditto.knowledge_base.retrieval import has_searchable_words, search

    assert not has_searchable_words(query) and search(query) == []
    out = runner.invoke(app, ["kb", "search", query])
    assert out.exit_code == 2, out.output
    assert "the query has no searchable words" in out.output and "Traceback" not in out.output
    assert len(out.output.strip().splitlines()) == 1
