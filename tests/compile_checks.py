"""The compile-side checks every reference kernel's own tests share: the compile-only verifier (source check,
compile, contract on PTX and SASS, launch geometry) finds nothing, and no entry point spills or keeps a stack."""

from __future__ import annotations

from sparseditto.spec import Spec
from sparseditto.tools.results import VerificationReport
from sparseditto.tools.verifier import CompileOnlyVerifier


def verify_compile_only(candidate, spec: Spec, entries: tuple[str, ...], arch: str = "sm_90") -> VerificationReport:
    """The report, after asserting it compiled, every stage passed and `entries` use registers only."""
    report = CompileOnlyVerifier(arch).verify(candidate, spec)
    assert report.compiled, [f.message for f in report.feedback]
    assert not [f for f in report.feedback if f.status in {"failed", "error"}], report.feedback
    for entry in entries:
        r = report.resources[entry]
        assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_bytes == 0, (entry, r)
    return report
