"""Tokens for BM25 that understand CUDA and PTX spellings.

A plain word tokenizer loses what kernel engineers search by: `mma.sp` and `cp.async.bulk.tensor` are
dotted instruction names, `__shfl_down_sync` and `spmm_csr_rowsplit` are snake_case identifiers,
`cusparseLtMatmulPlanInit` is camelCase, `sm_90a` is an architecture and `2:4` a sparsity ratio.
Each such token is kept whole (exact matches score high) and also split into its stemmed parts, so
that "mma sp", "shuffle down" or "matmul plan" still find them.
"""

from __future__ import annotations

import re
from functools import cache

import Stemmer

# a ratio (2:4), a number (4.8, 227), or an identifier with optional dotted parts (wgmma.mma_async.sp)
_RAW = re.compile(r"\d+:\d+|\d+(?:\.\d+)?[a-z]*|[A-Za-z_][\w]*(?:\.[A-Za-z_\d][\w]*)*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_ARCH = re.compile(r"^sm_?(\d{2,3})(a?)$")


@cache
def _stopwords() -> frozenset[str]:
    """bm25s's English list plus question words; loaded on first use (bm25s is slow to import)."""
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN) | {"how", "what", "which", "when", "why", "do", "does", "i", "my", "we", "can"}


@cache
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def _word(part: str) -> str | None:
    """A lower-case, stemmed word part; None for stopwords and empty parts."""
    part = part.lower()
    if not part or part in _stopwords():
        return None
    return _stemmer().stemWord(part) if part.isalpha() else part


def _expand(raw: str) -> list[str]:
    arch = _ARCH.match(raw.lower())
    if arch:  # sm90a, sm_90a -> sm_90a and sm_90: the suffix only changes the compile target
        base = f"sm_{arch.group(1)}"
        return [base + arch.group(2), base] if arch.group(2) else [base]
    if ":" in raw or raw[0].isdigit() or re.fullmatch(r"[A-Za-z]+\d+(?:[a-z]+\d+)*[a-z]?", raw):
        return [raw.lower()]  # 2:4, 227, bf16, fp32, m16n8k32: one token each
    whole = raw.strip("_").lower()
    pieces = [p for p in re.split(r"[._]+", raw) if p]
    compound = "." in raw or "_" in raw.strip("_") or bool(re.search(r"[a-z][A-Z]", raw))
    out = [whole] if compound else []
    if "." in raw:  # cp.async.bulk.tensor also answers "cp.async" and "cp.async.bulk"
        dotted = whole.split(".")
        out += [".".join(dotted[:i]) for i in range(2, len(dotted))]
    for piece in pieces:
        subs = _CAMEL.findall(piece) or [piece]
        for sub in subs:
            if len(subs) > 1 and len(sub) < 3:  # SpMM -> spmm only; cusparseLtMatmul -> no "lt"
                continue
            word = _word(sub)
            if word:
                out.append(word)
    return out


def tokenize(text: str) -> list[str]:
    """The BM25 tokens of a query or a passage (same rules for both)."""
    tokens: list[str] = []
    for raw in _RAW.findall(text):
        tokens.extend(_expand(raw))
    return tokens
