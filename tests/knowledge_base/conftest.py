"""Every knowledge-base test gets its own index cache folder, so none reads or writes ~/.cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def kb_cache(tmp_path_factory, monkeypatch):
    folder = tmp_path_factory.getbasetemp() / "kb-cache"
    monkeypatch.setenv("SPARSEDITTO_KB_CACHE_DIR", str(folder))
    return folder
