"""The registry of problem families: built-in packages, installed plug-ins and folders named by the user.

A family is found in three places, all alike: the subpackages of this package, the entry points of the
group `sparseditto.families` (an installed distribution), and the folders listed in the environment
variable `SPARSEDITTO_FAMILY_PATH` (os.pathsep-separated; child processes inherit it). Each is a
package whose `FAMILY` is a `ProblemFamily`; nothing else needs editing to add one.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pkgutil
import sys
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

from sparseditto.errors import SpecError
from sparseditto.tools.families.base import Output, Preparation, Prepared, Problem, ProblemFamily, StrategyStart

FAMILY_PATH_ENV = "SPARSEDITTO_FAMILY_PATH"


def _from_module(module_name: str) -> ProblemFamily:
    family = getattr(importlib.import_module(module_name), "FAMILY", None)
    if not isinstance(family, ProblemFamily):
        raise TypeError(f"{module_name}.FAMILY is not a ProblemFamily")
    return family


def _from_folder(folder: Path) -> ProblemFamily:
    """Import a family package that lives outside the installed tree, under a private module name."""
    if not (folder / "__init__.py").is_file():
        raise SpecError(f"{FAMILY_PATH_ENV}: {folder} is not a family package (no __init__.py)")
    # one module per folder: two folders of the same name (two checkouts, two test runs) never share one
    module_name = f"sparseditto_family_{folder.name}_{hashlib.sha256(str(folder).encode()).hexdigest()[:8]}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    return _from_module(module_name)


@cache
def _registry(family_path: str) -> dict[str, ProblemFamily]:
    found: list[ProblemFamily] = []
    for info in pkgutil.iter_modules(__path__):
        if info.ispkg:
            found.append(_from_module(f"{__name__}.{info.name}"))
    for ep in entry_points(group="sparseditto.families"):
        family = ep.load()
        found.append(family() if isinstance(family, type) else family)
    for entry in filter(None, family_path.split(os.pathsep)):
        found.append(_from_folder(Path(entry).expanduser().resolve()))
    registry: dict[str, ProblemFamily] = {}
    for family in found:
        if family.name in registry and registry[family.name] is not family:
            raise SpecError(f"two problem families are named {family.name!r}")
        registry[family.name] = family
    return registry


def families() -> dict[str, ProblemFamily]:
    """Every registered family by name (re-read when SPARSEDITTO_FAMILY_PATH changes)."""
    return _registry(os.environ.get(FAMILY_PATH_ENV, ""))


def get_family(name: str) -> ProblemFamily:
    try:
        return families()[name]
    except KeyError:
        raise SpecError(f"{name}: no such problem family; registered: {', '.join(sorted(families()))}") from None


__all__ = ["FAMILY_PATH_ENV", "Output", "Preparation", "Prepared", "Problem", "ProblemFamily", "StrategyStart",
           "families", "get_family"]
