"""compute-sanitizer output parsed into findings, on logs recorded on the H200 (tests/fixtures/sanitizer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparseditto.tools.sanitizer import TOOLS, parse_sanitizer, sanitizer_command

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sanitizer"


def findings(name: str, tool: str):
    return parse_sanitizer((FIXTURES / name).read_text(), tool)


def test_out_of_bounds_read_names_kernel_line_thread_and_size():
    found = findings("sanitizer_memcheck_out_of_bounds_read.txt", "memcheck")
    first = found[0]
    assert (first.kind, first.kernel, first.source, first.access_size) == ("out_of_bounds", "spmm_test", "candidate.cu:177", 4)
    assert (first.thread, first.block) == ("0,0,0", "0,0,0")
    assert first.address.startswith("0x")
    # the launch failure that follows is reported too, but as a consequence, not as the finding
    assert any(f.kind == "sanitizer_failure" and "Program hit" in f.message for f in found)


def test_out_of_bounds_write():
    found = [f for f in findings("sanitizer_memcheck_out_of_bounds_write.txt", "memcheck") if f.kind == "out_of_bounds"]
    assert found and all("write" in f.message for f in found)


def test_uninitialised_read():
    found = findings("sanitizer_initcheck_uninitialised_read.txt", "initcheck")
    assert len(found) == 20  # --print-limit 20 of the 257 reported
    assert {f.kind for f in found} == {"uninitialized_read"}
    assert found[0].source == "candidate.cu:177"


def test_shared_memory_race_with_hazard_count():
    (race,) = findings("sanitizer_racecheck_shared_memory_race.txt", "racecheck")
    assert race.kind == "shared_memory_race"
    assert race.kernel == "spmm_test" and race.hazards and race.hazards > 0


def test_divergent_barrier():
    found = findings("sanitizer_synccheck_divergent_barrier.txt", "synccheck")
    assert found and {f.kind for f in found} == {"sync_error"}
    assert found[0].kernel == "divergent_barrier" and found[0].thread == "0,0,0"


def test_a_crash_with_a_backtrace_keeps_one_finding_per_error():
    found = findings("sanitizer_memcheck_oob_write_crash.txt", "memcheck")
    assert sum(f.kind == "out_of_bounds" for f in found) >= 1
    assert not any("Host Frame" in f.message for f in found)


@pytest.mark.parametrize(("name", "tool"), [("sanitizer_memcheck_naive.txt", "memcheck"),
                                            ("sanitizer_racecheck_naive.txt", "racecheck")])
def test_clean_runs_have_no_findings(name, tool):
    assert findings(name, tool) == []


def test_command_pads_allocations_and_fails_on_errors():
    for tool in TOOLS:
        cmd = sanitizer_command(tool, ["python", "-m", "x"])
        assert cmd[:3] == ["compute-sanitizer", "--tool", tool]
        assert "--error-exitcode" in cmd and cmd[-3:] == ["python", "-m", "x"]
    assert "--padding" in sanitizer_command("memcheck", ["p"])
