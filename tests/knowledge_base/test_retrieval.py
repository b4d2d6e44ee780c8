"""Search: the right sections come first, filters drop what cannot apply, the plan re-ranks, the cache follows edits."""

from __future__ import annotations

import shutil

from sparseditto.knowledge_base import chunks, index
from sparseditto.knowledge_base.index import load_index
from sparseditto.knowledge_base.retrieval import Filters, PlanMatch, search


def ids(hits):
    return [h.id for h in hits]


def test_a_cuda_identifier_finds_its_section():
    assert ids(search("wgmma.fence commit_group wait_group", k=1)) == ["wgmma_layouts#warpgroups-and-the-issue-sequence"]
    assert search("cusparseLtMatmulSearch", k=1)[0].id == "cusparselt_workflow#algorithm-search"


def test_kernels_are_searchable_by_what_they_do():
    assert "kernel:spmv_csr_split_vec4" in ids(search("skewed power-law rows split into chunks", k=3))


def test_family_filter_keeps_general_pages_and_drops_other_families():
    hits = search("2:4 metadata sparse tensor cores spmm", Filters(family="csr_spmm"), k=20)
    assert hits
    assert not any(h.id.startswith(("sparse_mma_2_4", "cusparselt_workflow")) for h in hits)
    assert all(h.id != "kernel:spmv_csr_vec4" for h in search("vector spmv rows", Filters(family="csr_spmm"), k=20))


def test_arch_filter_drops_newer_instructions():
    query = "wgmma shared memory descriptor swizzle"
    assert any(h.id.startswith("wgmma_layouts") for h in search(query, Filters(arch="sm_90a"), k=5))
    assert any(h.id.startswith("wgmma_layouts") for h in search(query, Filters(arch="sm_90"), k=5))
    assert not any(h.id.startswith(("wgmma_layouts", "tma_and_mbarrier")) for h in search(query, Filters(arch="sm_80"), k=20))


def test_dtype_filter_drops_kernels_without_that_dtype():
    index = load_index()
    rowsplit = next(c for c in index.chunks if c.id == "kernel:spmm_csr_rowsplit")
    assert not Filters(dtype="fp8").admits(rowsplit)
    assert Filters(dtype="bf16").admits(rowsplit)


def test_plan_match_moves_the_plans_kernels_up():
    query = "warp per row, 16-byte gathers of B rows, tiling over N"
    plain = ids(search(query, k=10))
    ranked = ids(search(query, k=10, plan=PlanMatch(operation="spmm", format="csr", family="csr_spmm",
                                                     kernels=["spmm_csr_smem_tile"])))
    assert ranked.index("kernel:spmm_csr_smem_tile") < plain.index("kernel:spmm_csr_smem_tile")


def test_the_index_is_cached_and_rebuilt_when_a_doc_changes(tmp_path, monkeypatch, kb_cache):
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(chunks.DOCS_DIR / "sddmm.md", docs / "sddmm.md")
    monkeypatch.setattr(chunks, "DOCS_DIR", docs)
    monkeypatch.setattr(index, "KEEP", 1)
    monkeypatch.setenv("SPARSEDITTO_KB_CACHE_DIR", str(tmp_path / "cache"))

    first = load_index()
    assert first.built
    again = load_index()
    assert not again.built and again.folder == first.folder
    assert not search("zebrafish occupancy", k=3)

    (docs / "new_page.md").write_text("# Zebrafish\n\n## Occupancy of zebrafish tanks\n\nSome zebrafish text.\n")
    rebuilt = load_index()
    assert rebuilt.built and rebuilt.folder != first.folder
    assert search("zebrafish occupancy", k=1)[0].id == "new_page#occupancy-of-zebrafish-tanks"
    assert not first.folder.exists(), "indexes beyond the newest KEEP are removed"


def test_an_unwritable_cache_still_gives_an_index(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("SPARSEDITTO_KB_CACHE_DIR", str(blocker))
    fallback = load_index()
    assert fallback.built and not str(fallback.folder).startswith(str(blocker))
    assert search("cusparseLtMatmulSearch", k=1)[0].id == "cusparselt_workflow#algorithm-search"
    assert load_index().folder == fallback.folder, "built once per process, not at every search"
