"""Planner: spec (+ structural features) -> plan. Offline expert rules, no LLM needed.

The family ranks its strategies from the features (starting points measured on an H200, bench/NOTES.md);
the search spaces are the kernels' declared parameter values, and a choice is valid when it satisfies the
kernel's declared constraints for the problem's symbols and dtype.
"""

from __future__ import annotations

import structlog

from sparseditto.agents.schemas import Acceptance, Plan, Strategy
from sparseditto.knowledge_base.library import get_kernel, kernels_for
from sparseditto.spec import Spec
from sparseditto.tools.baselines import libraries_for
from sparseditto.tools.families import get_family

log = structlog.get_logger(__name__)


def spec_features(spec: Spec) -> dict[str, float]:
    """The family's structural features of the spec (computed once per run by the caller)."""
    return get_family(spec.family).features(spec)


def offline_plan(spec: Spec, feats: dict[str, float] | None = None) -> Plan:
    """Strategies from the spec and its features (computed here unless the caller has them)."""
    family = get_family(spec.family)
    feats = feats if feats is not None else family.features(spec)
    symbols = family.symbols(spec)
    available = {k.name: k for k in kernels_for(family.name, spec.dtype, spec.arch)}
    strategies = []
    for start in family.strategies(spec, feats):
        kernel = available.get(start.kernel)
        if kernel is None:  # not for this dtype or architecture
            continue
        if broken := kernel.violated(start.start, symbols, spec.dtype):
            log.warning("strategy_start_invalid", kernel=start.kernel, constraint=broken)
            continue
        # each parameter's declared values that keep the constraints with the others at their start
        space = {p: [v for v in values if kernel.violated({**start.start, p: v}, symbols, spec.dtype) is None]
                 for p, values in kernel.parameters.items()}
        strategies.append(Strategy(kernel=start.kernel, start=start.start, why=start.why, space=space,
                                   predicted_us=start.predicted_us, calibrated_us=start.predicted_us))
    return Plan(
        family=family.name,
        format=family.format,
        features=feats,
        symbols=symbols,
        strategies=strategies,
        baselines=list(spec.baselines or libraries_for(family.name)),
        acceptance=Acceptance(min_speedup=1.0, target_speedup=family.target_speedup),
        notes="offline expert policy",
    )


def is_valid_choice(kernel: str, params: dict[str, int], dtype: str, symbols: dict[str, int]) -> bool:
    """Whether a reference kernel's parameters satisfy its declared constraints for this problem and dtype."""
    return get_kernel(kernel).violated(params, symbols, dtype) is None
