"""Structured output with a bounded repair loop.

The schema goes to the endpoint as plain JSON Schema (as a tool for function calling, as a response
format for json_schema, in the prompt for json mode) and the answer is validated here: that way an
answer that does not validate still arrives with its text and token counts, and the exact error can be
sent back for repair. `convert` adds the checks the schema cannot express (the kernel contract, the
knowledge base's parameter ranges); its ValueError is a rejection like any other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Generic, TypeVar

import httpx
import openai
import structlog
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ValidationError

from sparseditto.agents.llm_trace import Attempt, Usage, answer_text, message_dict
from sparseditto.settings import OutputMethod

log = structlog.get_logger(__name__)
S = TypeVar("S", bound=BaseModel)
T = TypeVar("T")


class Answer(BaseModel, Generic[T]):
    """The converted result (None when every attempt was rejected) and the attempts that led to it."""

    value: T | None = None
    attempts: list[Attempt] = []
    failure: str | None = None

    @property
    def usage(self) -> Usage:
        return sum((a.usage for a in self.attempts), Usage())


def schema_format(schema: type[BaseModel], method: OutputMethod) -> dict:
    """The schema in the form `with_structured_output` sends for `method`, without pydantic parsing."""
    function = convert_to_openai_tool(schema)["function"]
    if method == "json_schema":
        return {"name": function["name"], "description": function.get("description", ""), "schema": function["parameters"]}
    return function


def schema_instructions(schema: type[BaseModel]) -> str:
    """For json mode, where the endpoint is not told the schema: the prompt must carry it."""
    return ("Answer with one JSON object, nothing else, that validates against this JSON Schema:\n"
            + json.dumps(convert_to_openai_tool(schema)["function"]["parameters"], indent=1))


def validation_message(exc: Exception) -> str:
    """A ValidationError as a few lines naming the fields, the way a model can act on it."""
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}" for e in exc.errors()[:6])
    return str(exc)


def _repair_request(answer: str, error: str) -> HumanMessage:
    return HumanMessage(f"Your answer was rejected: {error}\n\nYour answer was:\n{answer[:4000]}\n\n"
                        "Answer again, with the whole object corrected.")


def ask(model: BaseChatModel, schema: type[S], messages: list[BaseMessage], convert: Callable[[S], T], *,
        method: OutputMethod, repair_attempts: int) -> Answer[T]:
    """Ask for `schema`, convert it, and repair up to `repair_attempts` times; transport errors end the step."""
    runnable = model.with_structured_output(schema_format(schema, method), method=method, include_raw=True)
    conversation = list(messages)
    new = list(messages)
    attempts: list[Attempt] = []
    for _ in range(repair_attempts + 1):
        try:
            out = runnable.invoke(conversation)
        except (openai.OpenAIError, httpx.HTTPError) as exc:
            reason = f"endpoint error: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            log.warning("llm_call_failed", schema=schema.__name__, error=reason)
            attempts.append(Attempt(messages=[message_dict(m) for m in new], answer="", usage=Usage(), error=reason))
            return Answer(attempts=attempts, failure=reason)
        raw: AIMessage = out["raw"]
        text = answer_text(raw)
        error: str | None = None
        value: T | None = None
        if out["parsing_error"] is not None or out["parsed"] is None:
            error = f"not a JSON object of the requested form ({out['parsing_error'] or 'no structured answer'})"
        else:
            try:
                value = convert(schema.model_validate(out["parsed"]))
            except (ValidationError, ValueError) as exc:
                error = validation_message(exc)
        attempts.append(Attempt(messages=[message_dict(m) for m in new], answer=text, usage=Usage.of(raw), error=error))
        if error is None:
            return Answer(value=value, attempts=attempts)
        log.info("llm_answer_rejected", schema=schema.__name__, error=error)
        new = [_repair_request(text, error)]
        conversation = [*messages, *new]
    return Answer(attempts=attempts, failure=f"no valid answer after {len(attempts)} attempts; last: {attempts[-1].error}")
