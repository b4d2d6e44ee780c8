"""Reference kernels, docs, the BM25 retriever and the experience store that the agents build on."""

import os

# bm25s runs a JAX top-k at import when JAX is installed; on a GPU machine that makes JAX claim most of
# the GPU's memory in every process that imports the retriever. The index needs no GPU: keep JAX on the CPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
