"""A chat model that answers from a script, for unit tests of the LLM agents without any network.

Its structured output mirrors what ChatOpenAI returns with include_raw=True: the raw message, the
parsed JSON (tool-call arguments or the text) and the parsing error.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableLambda
from pydantic import Field


def answer(obj: Any, prompt: int = 100, completion: int = 40, tool: str | None = None) -> AIMessage:
    """A scripted answer: `obj` as JSON text (or as the arguments of a call of `tool`), with its token counts."""
    usage = {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}
    if tool:
        return AIMessage(content="", tool_calls=[{"name": tool, "args": obj, "id": "call_1"}], usage_metadata=usage)
    return AIMessage(content=obj if isinstance(obj, str) else json.dumps(obj), usage_metadata=usage)


class ScriptedChatModel(BaseChatModel):
    """Pops one scripted answer per call (an exception in the script is raised); records every request."""

    script: list[Any]
    requests: list[list[BaseMessage]] = Field(default_factory=list)
    methods: list[str] = Field(default_factory=list)
    model_name: str = "scripted"

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.requests.append(list(messages))
        if not self.script:
            raise AssertionError("the scripted model was called more often than scripted")
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return ChatResult(generations=[ChatGeneration(message=item)])

    def with_structured_output(self, schema: Any, *, method: str = "json_schema", include_raw: bool = False, **kwargs: Any):
        self.methods.append(method)

        def run(messages: list[BaseMessage]) -> dict[str, Any]:
            raw = self.invoke(messages)
            if raw.tool_calls:
                return {"raw": raw, "parsed": raw.tool_calls[0]["args"], "parsing_error": None}
            try:
                return {"raw": raw, "parsed": json.loads(raw.content), "parsing_error": None}
            except json.JSONDecodeError as exc:
                return {"raw": raw, "parsed": None, "parsing_error": exc}

        return RunnableLambda(run)

    def text_of(self, call: int) -> str:
        """Everything sent in one call, as one string."""
        return "\n".join(str(m.content) for m in self.requests[call])
