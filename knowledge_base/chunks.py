"""The knowledge base cut into retrievable chunks: doc sections and reference kernels.

A doc page is split at its `##` headings, so a hit points at the section that answers, not at a whole
page; each chunk keeps the page title for context. A page may open with a YAML block (`families`,
`archs`, `dtypes`) that the metadata filters read; a page without one applies everywhere. A reference
kernel is one chunk: its metadata, measured results and the mapping comment above its code.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel

from sparseditto.knowledge_base.library import PRELUDE_FILE, ReferenceKernel, reference_kernels

DOCS_DIR = Path(__file__).parent / "docs"
_FRONT = re.compile(r"^---\n(.*?)\n---\n", re.S)
_HEADING = re.compile(r"^(#{1,2}) (.+)$", re.M)
# sections that only list sources are not answers
_SKIPPED = {"sources"}


class Chunk(BaseModel):
    """One retrievable passage and the metadata the filters and the re-ranking read."""

    id: str
    kind: Literal["doc", "kernel"]
    title: str
    source: str
    text: str
    families: list[str] = []
    operations: list[str] = []
    formats: list[str] = []
    archs: list[str] = []
    dtypes: list[str] = []


def slug(heading: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def doc_pages() -> list[Path]:
    return sorted(DOCS_DIR.glob("*.md"))


def page_title(path: Path) -> str:
    match = _HEADING.search(path.read_text())
    return match.group(2).strip() if match else path.stem


def _doc_chunks(path: Path) -> list[Chunk]:
    text = path.read_text()
    meta: dict = {}
    if front := _FRONT.match(text):
        meta = yaml.safe_load(front.group(1)) or {}
        text = text[front.end():]
    heads = list(_HEADING.finditer(text))
    title = next((h.group(2).strip() for h in heads if h.group(1) == "#"), path.stem)
    chunks = []
    for i, head in enumerate(heads):
        body = text[head.end(): heads[i + 1].start() if i + 1 < len(heads) else len(text)].strip()
        heading = head.group(2).strip()
        if not body or heading.lower() in _SKIPPED:
            continue
        cid = path.stem if head.group(1) == "#" else f"{path.stem}#{slug(heading)}"
        section = title if head.group(1) == "#" else f"{title}: {heading}"
        chunks.append(Chunk(id=cid, kind="doc", title=section, source=f"knowledge_base/docs/{path.name}",
                            text=f"{section}\n{body}", **{k: list(meta.get(k, [])) for k in
                                                          ("families", "operations", "formats", "archs", "dtypes")}))
    return chunks


def _mapping_comment(body: str) -> str:
    """The `//` comment block before the first entry point: the kernel's mapping, in words."""
    lines = []
    for line in body.splitlines():
        if line.startswith("//"):
            lines.append(line[2:].strip())
        elif lines and line.strip():
            break
    return " ".join(lines)


def kernel_chunk(k: ReferenceKernel) -> Chunk:
    measured = "; ".join(f"{m.spec} on {m.gpu}: {m.median_us} us, {m.speedup}x vs {m.best_baseline}" for m in k.measured)
    params = ", ".join(f"{name} in {list(values)}" for name, values in k.parameters.items())
    text = (f"{k.name}: {k.operation} {k.format} reference kernel, strategy {k.strategy}, family {k.family}, "
            f"dtypes {', '.join(k.dtypes)}, archs {', '.join(k.archs)}.\n{k.summary.strip()}\n"
            f"Parameters: {params}.\n" + (f"Preparation: {k.preparation}.\n" if k.preparation else "")
            + (f"Measured: {measured}.\n" if measured else "") + _mapping_comment(k.body))
    return Chunk(id=f"kernel:{k.name}", kind="kernel", title=f"reference kernel {k.name}", source=_shown_path(k.path),
                 text=text, families=[k.family], operations=[k.operation], formats=[k.format], archs=list(k.archs),
                 dtypes=list(k.dtypes))


def all_chunks() -> list[Chunk]:
    """Every chunk of the knowledge base, in a stable order."""
    chunks = [c for page in doc_pages() for c in _doc_chunks(page)]
    return chunks + [kernel_chunk(k) for k in reference_kernels()]


def _shown_path(path: Path) -> str:
    """A kernel file's path as reports show it: from the project root for built-in families, else as it is."""
    root = PRELUDE_FILE.parents[2]
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def knowledge_base_files() -> list[Path]:
    return doc_pages() + [PRELUDE_FILE] + [k.path for k in reference_kernels()]


def fingerprint(code: list[Path]) -> str:
    """A hash of every knowledge-base file and of the `code` that turns them into an index."""
    digest = hashlib.sha256()
    for path in knowledge_base_files() + code:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
