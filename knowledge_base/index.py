"""The BM25 index over the knowledge-base chunks, built once and cached on disk.

The cache folder is named by a hash of every knowledge-base file and of the code that builds the
index, so editing a doc page, a kernel or the tokenizer makes the next search rebuild the index (older
indexes beyond the newest few are removed). The location is the setting
`kb_cache_dir` (env `SPARSEDITTO_KB_CACHE_DIR`), by default `$XDG_CACHE_HOME/sparseditto/kb`, that is
`~/.cache/sparseditto/kb`. A build writes to a temporary folder and renames it into place, so
concurrent runs never read a half-written index.
"""

from __future__ import annotations

import dataclasses

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from sparseditto.knowledge_base.chunks import Chunk, all_chunks, fingerprint
from sparseditto.knowledge_base.tokenizer import tokenize
from sparseditto.settings import Settings

if TYPE_CHECKING:
    import bm25s

log = structlog.get_logger(__name__)

_CHUNKS_FILE = "chunks.json"
KEEP = 4
# per process: where the index went when the cache folder could not be written
_FALLBACK: dict[Path, Path] = {}
# a change to the tokenizer or the chunking changes the index too: their source is part of the key
_INDEX_CODE = [Path(__file__).parent / name for name in ("tokenizer.py", "chunks.py", "index.py", "library.py")]


def cache_root() -> Path:
    configured = Settings().kb_cache_dir
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sparseditto" / "kb"


@dataclass(frozen=True)
class KnowledgeIndex:
    chunks: tuple[Chunk, ...]
    bm25: "bm25s.BM25"
    folder: Path
    built: bool  # True when this process built it, False when it was loaded from the cache


def current_folder() -> Path:
    return cache_root() / fingerprint(_INDEX_CODE)


def _build(folder: Path) -> None:
    import bm25s  # imported where used: it is slow to import and the CLI and runner start without it

    chunks = all_chunks()
    model = bm25s.BM25()
    model.index([tokenize(c.text) for c in chunks], show_progress=False)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=folder.parent))
    model.save(str(tmp), show_progress=False)
    (tmp / _CHUNKS_FILE).write_text(json.dumps([c.model_dump() for c in chunks]))
    try:
        tmp.rename(folder)
    except OSError:  # another process finished first: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
    _prune(folder.parent)
    log.info("kb_index_built", folder=str(folder), chunks=len(chunks))


def _prune(root: Path) -> None:
    """Keep the KEEP newest indexes: checkouts of other versions may share the cache and still use theirs."""
    built = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".build-")),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in built[KEEP:]:
        shutil.rmtree(stale, ignore_errors=True)


@cache
def _load(folder: Path) -> KnowledgeIndex:
    import bm25s

    chunks = tuple(Chunk.model_validate(c) for c in json.loads((folder / _CHUNKS_FILE).read_text()))
    return KnowledgeIndex(chunks=chunks, bm25=bm25s.BM25.load(str(folder), show_progress=False), folder=folder, built=False)


def load_index() -> KnowledgeIndex:
    """The index of the knowledge base as it is now: from the cache, or built and cached."""
    current = current_folder()
    folder = _FALLBACK.get(current, current)
    if (folder / _CHUNKS_FILE).is_file():
        return _load(folder)
    try:
        _build(folder)
    except OSError as exc:  # an unwritable cache must not stop a run: index into a private temp folder
        log.warning("kb_cache_unwritable", folder=str(folder), error=str(exc))
        folder = _FALLBACK[current] = Path(tempfile.mkdtemp(prefix="sparseditto-kb-")) / current.name
        _build(folder)
    return dataclasses.replace(_load(folder), built=True)
