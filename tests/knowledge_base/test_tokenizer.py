"""The tokenizer keeps CUDA spellings whole and also splits them into searchable parts."""

from __future__ import annotations

import pytest

from sparseditto.knowledge_base.tokenizer import tokenize


@pytest.mark.parametrize("text, expected", [
    ("mma.sp", ["mma.sp", "mma", "sp"]),
    ("cp.async.bulk.tensor", ["cp.async.bulk.tensor", "cp.async", "cp.async.bulk", "cp", "async", "bulk", "tensor"]),
    ("__shfl_down_sync", ["shfl_down_sync", "shfl", "down", "sync"]),
    ("cusparseLtMatmulSearch", ["cusparseltmatmulsearch", "cuspars", "matmul", "search"]),
    ("2:4", ["2:4"]),
    ("m16n8k32 bf16", ["m16n8k32", "bf16"]),
    ("SpMM", ["spmm"]),
])
def test_cuda_identifiers(text, expected):
    assert tokenize(text) == expected


@pytest.mark.parametrize("spelling", ["sm_90a", "sm90a", "SM_90a"])
def test_architectures_are_normalized_and_match_the_base_arch(spelling):
    assert tokenize(spelling) == ["sm_90a", "sm_90"]
    assert tokenize("sm80") == ["sm_80"]


def test_words_are_stemmed_and_stopwords_dropped():
    assert tokenize("Uncoalesced loads in the SpMM") == tokenize("uncoalesced load in spmm")
    assert "the" not in tokenize("the bank conflicts")
    assert tokenize("conflicts") == tokenize("conflict")


def test_numbers_and_ratios_survive():
    assert tokenize("227 KB per block, 4.8 TB/s")[:2] == ["227", "kb"]
    assert "4.8" in tokenize("4.8 TB/s")
