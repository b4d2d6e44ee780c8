"""LangGraph Studio's server end to end: `langgraph dev` from the repository root (langgraph.json), driven with
the SDK as Studio drives it.

The server runs in memory, on a free port, WITHOUT --allow-blocking, so a blocking call on its event loop in
any node fails the run (blockbuster). It runs compile-only (SPARSEDITTO_COMPILE_ONLY=1, the same on a GPU
machine); the runs that must reach the approval gate get their GPU results from a test double,
tests/graph/studio_doubles.py, through graph/studio.py's test seam (SPARSEDITTO_TEST_VERIFIER plus the run's
context {"verifier": "test"}).

Skipped only when the `langgraph` executable is not installed (`pip install -e '.[studio]'`, part of `.[dev]`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparseditto.errors import SpecError
from sparseditto.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]
GRAPH = "sparseditto"
# the documents' short form (README, "Spec format"), small enough to compile in seconds
SHORT_FORM = {"task": "sparse_matmul_kernel", "sparsity_pattern": {"type": "unstructured", "sparsity_ratio": 0.98},
              "matrix_shape": [512, 512, 32], "dtype": "fp32"}
GATED = {"name": "studio_gate", "operation": "spmm", "pattern": {"distribution": "uniform", "density": 0.05},
         "M": 256, "K": 256, "N": 32, "dtype": "fp32", "budget": {"iterations": 2}}
TEST_VERIFIER = {"verifier": "test"}
MASKED = "An internal error occurred"
RUN_TIMEOUT_S = 60


def _langgraph() -> str | None:
    """The `langgraph` executable beside this interpreter (a venv's bin/, not always on PATH), else on PATH."""
    beside = Path(sys.executable).parent / "langgraph"
    return str(beside) if beside.is_file() else shutil.which("langgraph")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, url: str, log: Path, runs_dir: Path) -> None:
        self.url, self.log, self.runs_dir = url, log, runs_dir

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    exe = _langgraph()
    if exe is None:
        pytest.skip("the `langgraph` executable is not installed (pip install -e '.[studio]')")
    tmp = tmp_path_factory.mktemp("studio")
    port = _free_port()
    env = {
        **os.environ,
        "SPARSEDITTO_RUNS_DIR": str(tmp / "runs"),
        "SPARSEDITTO_COMPILE_ONLY": "1",
        "SPARSEDITTO_TEST_VERIFIER": "studio_doubles:SlowerThanBaselines",
        "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).parent), str(Path(__file__).parents[1]),
                                                  os.environ.get("PYTHONPATH")) if p),
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "LANGSMITH_TRACING": "false",
    }
    # the in-memory server keeps its threads in .langgraph_api/ of its working directory: removed after the test
    # unless it was there before (a person's own Studio threads)
    state_dir = REPO / ".langgraph_api"
    had_state = state_dir.exists()
    log = tmp / "langgraph_dev.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [exe, "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    srv = Server(f"http://127.0.0.1:{port}", log, tmp / "runs")
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"langgraph dev exited with {proc.returncode}:\n{srv.log_tail()}")
            try:
                if httpx.get(f"{srv.url}/ok", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"langgraph dev not healthy after 60 s:\n{srv.log_tail()}")
            time.sleep(0.25)
        yield srv
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if not had_state:
            shutil.rmtree(state_dir, ignore_errors=True)


def client(server: Server) -> Any:
    from langgraph_sdk import get_client

    return get_client(url=server.url)


async def stream(c: Any, thread_id: str, **kwargs: Any) -> list[tuple[str, Any]]:
    """One run on the thread, streamed (custom and updates) to its end: every (event, data) the client saw."""
    parts: list[tuple[str, Any]] = []

    async def consume() -> None:
        async for part in c.runs.stream(thread_id, GRAPH, stream_mode=["custom", "updates"], **kwargs):
            parts.append((part.event, part.data))

    async with asyncio.timeout(RUN_TIMEOUT_S):
        await consume()
    return parts


def custom_events(parts: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [data for event, data in parts if event == "custom"]


def errors(parts: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [data for event, data in parts if event == "error"]


async def questions(c: Any, thread_id: str) -> list[dict[str, Any]]:
    """The payloads of the interrupts the thread waits on."""
    state = await c.threads.get_state(thread_id)
    return [i["value"] for task in state["tasks"] for i in task.get("interrupts", [])]


async def status(c: Any, thread_id: str) -> str:
    return (await c.threads.get(thread_id))["status"]


async def values(c: Any, thread_id: str) -> dict[str, Any]:
    return (await c.threads.get_state(thread_id))["values"]


def readme_studio_input() -> dict[str, Any]:
    """The input the README's Studio section tells a person to paste."""
    section = (REPO / "README.md").read_text().split("## LangGraph Studio", 1)[1]
    return json.loads(section.split("```json", 1)[1].split("```", 1)[0])


async def test_input_schema_documents_the_spec(server: Server) -> None:
    c = client(server)
    [assistant] = await c.assistants.search(graph_id=GRAPH)
    schemas = await c.assistants.get_schemas(assistant["assistant_id"])
    spec = schemas["input_schema"]["properties"]["spec"]
    assert spec["type"] == "object"
    assert "operation" in spec["description"] and "short form" in spec["description"]
    assert schemas["input_schema"]["properties"]["on_budget"]["enum"] == ["ask", "approve", "abort"]
    # the run's internals (plan, iterations, ...) are not asked for
    assert "iterations" not in schemas["input_schema"]["properties"]
    # the example Studio shows is the README's, and it is a valid spec
    assert schemas["input_schema"]["examples"] == [readme_studio_input()]
    parse_spec(readme_studio_input()["spec"])


async def test_short_form_spec_streams_progress_and_ends_compiled_only(server: Server) -> None:
    c = client(server)
    thread = await c.threads.create()
    parts = await stream(c, thread["thread_id"], input={"spec": SHORT_FORM})

    assert not errors(parts), f"{errors(parts)}\n{server.log_tail()}"
    events = custom_events(parts)
    names = [e["event"] for e in events]
    for name in ("planning", "planned", "retrieved", "candidate", "verifying", "verified", "reviewed", "finished"):
        assert name in names, names
    assert {e["backend"] for e in events if e["event"] == "verifying"} == {"compile_only"}
    assert events[-1] == {"event": "finished", "status": "compiled_only", "artifacts": events[-1]["artifacts"]}
    updated = {node for event, data in parts if event == "updates" for node in data}
    assert {"planner", "retriever", "coder", "tool", "reviewer", "finalize"} <= updated

    assert await status(c, thread["thread_id"]) == "idle"
    final = await values(c, thread["thread_id"])
    assert final["status"] == "compiled_only"
    assert (Path(final["artifacts_dir"]) / "kernel.cu").is_file()
    assert Path(final["artifacts_dir"]).parent == server.runs_dir
    assert "BlockingError" not in server.log_tail(200_000)


async def _gated(c: Any) -> str:
    """A thread whose 2-iteration budget is spent with correct kernels slower than the baselines: at the gate."""
    thread = await c.threads.create()
    parts = await stream(c, thread["thread_id"], input={"spec": GATED}, context=TEST_VERIFIER)
    assert not errors(parts), errors(parts)
    assert {e["backend"] for e in custom_events(parts) if e["event"] == "verifying"} == {"gpu"}
    assert "__interrupt__" in {node for event, data in parts if event == "updates" for node in data}
    assert await status(c, thread["thread_id"]) == "interrupted"
    [question] = await questions(c, thread["thread_id"])
    assert question["reason"] == "iteration budget spent (2 of 2)"
    assert "0.80x" in question["best"]["outcome"]
    assert "approve" in question["answers"] and "abort" in question["answers"]
    return thread["thread_id"]


async def _answer(c: Any, thread_id: str, answer: Any) -> list[tuple[str, Any]]:
    parts = await stream(c, thread_id, command={"resume": answer}, context=TEST_VERIFIER)
    assert not errors(parts), errors(parts)
    return parts


async def test_gate_approve_finishes_with_the_best_kernel(server: Server) -> None:
    c = client(server)
    thread_id = await _gated(c)
    parts = await _answer(c, thread_id, {"action": "approve"})
    assert {"event": "human", "action": "approve", "iterations": 0} in custom_events(parts)
    assert await status(c, thread_id) == "idle"
    final = await values(c, thread_id)
    assert final["status"] == "approved_best"
    assert len(final["iterations"]) == 2
    assert (Path(final["artifacts_dir"]) / "kernel.cu").is_file()


async def test_gate_extend_runs_one_more_iteration_and_asks_again(server: Server) -> None:
    c = client(server)
    thread_id = await _gated(c)
    parts = await _answer(c, thread_id, {"action": "extend", "iterations": 1})
    events = custom_events(parts)
    assert {"event": "human", "action": "extend", "iterations": 1} in events
    assert [e["iteration"] for e in events if e["event"] == "verified"] == [3]
    assert await status(c, thread_id) == "interrupted"
    [question] = await questions(c, thread_id)
    assert question["reason"] == "iteration budget spent (3 of 3)"

    await _answer(c, thread_id, "abort")
    assert await status(c, thread_id) == "idle"
    final = await values(c, thread_id)
    assert final["status"] == "aborted" and len(final["iterations"]) == 3


async def test_gate_asks_again_after_an_invalid_answer(server: Server) -> None:
    c = client(server)
    thread_id = await _gated(c)

    for invalid in ("yes", {"action": "nuke"}):
        await _answer(c, thread_id, invalid)
        # not ended, not aborted: the same question again, with why the answer was refused
        assert await status(c, thread_id) == "interrupted", invalid
        [question] = await questions(c, thread_id)
        assert question["reason"] == "iteration budget spent (2 of 2)"
        assert "approve" in question["retry"] and "extend" in question["retry"], question["retry"]
        assert "status" not in await values(c, thread_id)

    await _answer(c, thread_id, "approve")
    assert await status(c, thread_id) == "idle"
    final = await values(c, thread_id)
    assert final["status"] == "approved_best"
    assert final["human"]["action"] == "approve"


@pytest.mark.parametrize("spec", [
    {"operation": "spmm", "M": -1},
    {"operation": "spmm", "pattern": {"distribution": "uniform", "density": 0.05}, "M": -1, "K": 256, "N": 32},
], ids=["no_pattern", "negative_M"])
async def test_a_bad_spec_reaches_the_client_with_its_message(server: Server, spec: dict[str, Any]) -> None:
    with pytest.raises(SpecError) as expected:
        parse_spec(spec)
    c = client(server)
    thread = await c.threads.create()
    parts = await stream(c, thread["thread_id"], input={"spec": spec})
    [error] = errors(parts)
    assert error["message"] != MASKED
    assert str(expected.value) in error["message"]
    assert await status(c, thread["thread_id"]) == "error"


@pytest.mark.parametrize("graph_input", [{}, {"spec": {}}, {"on_budget": "ask"}], ids=["empty", "empty_spec", "no_spec"])
async def test_an_input_without_a_spec_says_so(server: Server, graph_input: dict[str, Any]) -> None:
    c = client(server)
    thread = await c.threads.create()
    parts = await stream(c, thread["thread_id"], input=graph_input)
    [error] = errors(parts)
    assert "the input needs a spec" in error["message"], error
    assert "KeyError" not in error["error"]
