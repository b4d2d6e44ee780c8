"""Structured output through the real ChatOpenAI client, for each output method, against the replay server."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import HumanMessage
from llm.replay_server import ReplayServer, completion

from sparseditto.agents.llm_models import chat_model
from sparseditto.agents.llm_schemas import ReviewAnswer
from sparseditto.agents.llm_structured import ask
from sparseditto.settings import Settings

VERDICT = {"decision": "revise", "bottleneck": "gather-bound", "direction": "stage B in shared memory"}


def reply(method: str, args: dict):
    return completion(tool="ReviewAnswer", args=args) if method == "function_calling" else completion(content=json.dumps(args))


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
def test_each_method_sends_the_schema_its_way_and_repairs_over_http(method):
    with ReplayServer([reply(method, {"decision": "maybe"}), reply(method, VERDICT)]) as server:
        model = chat_model(Settings(llm_base_url=server.url, llm_model="replay-model"), "reviewer")
        result = ask(model, ReviewAnswer, [HumanMessage("review this")], lambda a: a, method=method, repair_attempts=1)
    assert result.value == ReviewAnswer.model_validate(VERDICT)
    assert "decision" in result.attempts[0].error and "bottleneck" in result.attempts[0].error
    first, second = server.requests
    if method == "json_schema":
        assert first["response_format"]["json_schema"]["name"] == "ReviewAnswer"
    elif method == "function_calling":
        assert first["tool_choice"]["function"]["name"] == "ReviewAnswer"
    else:
        assert first["response_format"] == {"type": "json_object"}
    assert "Your answer was rejected" in second["messages"][-1]["content"]
    assert result.usage.total == 300
