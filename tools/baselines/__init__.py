"""Vendor-library baselines, in a registry keyed by (family, library).

A speedup is only honest against the vendor library at its best, so each library module offers every
sensible configuration (algorithm, layout, preprocessing, front end) and the harness times them all and keeps
the fastest correct one per library. A module registers, per family, a builder `(problem, device) ->
list[Candidate]` (device: the problem's input names -> device arrays) with `@register(family, library)`;
`baseline_calls` builds the candidates, trial-runs each once and drops those the library rejects. The library
name is the one specs, reports and `BaselineCall.library` use. GPU libraries are imported inside functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sparseditto.tools.baselines.common import BaselineCall, Candidate, collect

if TYPE_CHECKING:
    from sparseditto.tools.families.base import Problem

Builder = Callable[["Problem", Mapping[str, Any]], list[Candidate]]

# family -> library -> builder, in registration order
_BUILDERS: dict[str, dict[str, Builder]] = {}


class UnknownBaseline(ValueError):
    """A library that is not registered for the family."""


def register(family: str, library: str) -> Callable[[Builder], Builder]:
    """Decorator: `builder` offers `library`'s configurations for `family`; each pair is registered once."""

    def add(builder: Builder) -> Builder:
        libraries = _BUILDERS.setdefault(family, {})
        if library in libraries:
            raise ValueError(f"baseline library {library!r} is already registered for family {family!r}")
        libraries[library] = builder
        return builder

    return add


def libraries_for(family: str) -> tuple[str, ...]:
    """The libraries registered for `family`, in registration order; () for a family without baselines."""
    return tuple(_BUILDERS.get(family, {}))


def candidates(family: str, libraries: Sequence[str], problem: Problem, device: Mapping[str, Any]) -> list[Candidate]:
    """The configurations of each named library (empty: every library registered for the family, as
    `spec.baselines` means), in registration order; nothing is built yet."""
    known = libraries_for(family)
    if unknown := [name for name in libraries if name not in known]:
        raise UnknownBaseline(f"no baseline library {', '.join(map(repr, unknown))} for family {family!r}; "
                              f"registered: {', '.join(known) or 'none'}")
    chosen = [name for name in known if name in libraries or not libraries]
    return [option for name in chosen for option in _BUILDERS[family][name](problem, device)]


def baseline_calls(family: str, libraries: Sequence[str], problem: Problem,
                   device: Mapping[str, Any]) -> list[BaselineCall]:
    """Every working configuration of the named libraries (see `candidates`), each trial-run once on the current
    CuPy stream; configurations the library rejects are dropped."""
    return collect(candidates(family, libraries, problem, device))


def available_libraries() -> dict[str, str]:
    """Versions of the libraries behind the baselines, or why each one is unavailable (`sparseditto doctor`)."""
    versions: dict[str, str] = {}
    try:
        import cupy

        versions["cupy"] = cupy.__version__
    except Exception as exc:  # any import failure means "not available"
        versions["cupy"] = f"not importable: {exc}"
    try:
        import cupy
        from cupy_backends.cuda.libs import cusparse

        versions["cusparse"] = str(cusparse.getVersion(cupy.cuda.device.get_cusparse_handle()))
    except Exception as exc:  # missing library or no GPU
        versions["cusparse"] = f"not available: {str(exc).splitlines()[0]}"
    try:
        import torch

        cuda_note = "" if torch.cuda.is_available() else " (no CUDA device)"
        versions["torch"] = f"{torch.__version__}{cuda_note}"
    except Exception as exc:  # torch is optional
        versions["torch"] = f"not importable: {exc}"
    return versions


# The built-in library modules register themselves on import (after `register` exists); their order is the
# registry's order.
from sparseditto.tools.baselines import cusparse, torch_sparse, cublas, cusparselt, sparse24_dense  # noqa: E402, F401, I001
