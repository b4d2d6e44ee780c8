"""What the LLM policy did, step by step: prompts sent, answers, tokens, repairs and fallbacks.

Steps are kept in the graph state (so a resumed run keeps its history) and written by the artifacts
as `trace.jsonl` (one step per line) and `trace.md` (for a person).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage
from pydantic import BaseModel


class Usage(BaseModel):
    """Tokens of one or more calls, as the endpoint reported them."""

    prompt: int = 0
    completion: int = 0
    total: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(prompt=self.prompt + other.prompt, completion=self.completion + other.completion,
                     total=self.total + other.total)

    @classmethod
    def of(cls, message: BaseMessage) -> Usage:
        meta = getattr(message, "usage_metadata", None) or {}
        prompt, completion = int(meta.get("input_tokens", 0)), int(meta.get("output_tokens", 0))
        return cls(prompt=prompt, completion=completion, total=int(meta.get("total_tokens", prompt + completion)))

    def cost_usd(self, prompt_per_1k: float, completion_per_1k: float) -> float:
        return self.prompt / 1000 * prompt_per_1k + self.completion / 1000 * completion_per_1k


class Attempt(BaseModel):
    """One request and its answer; `error` says why the answer was rejected (None: accepted).

    `messages` holds what this attempt added to the conversation: the whole prompt for the first
    attempt, the repair request for the later ones.
    """

    messages: list[dict[str, str]]
    answer: str
    usage: Usage
    error: str | None = None


class Step(BaseModel):
    """One agent step under the LLM policy: every attempt, and whether the offline policy took over."""

    node: str
    iteration: int
    policy: Literal["llm", "offline"]
    model: str | None = None
    method: str | None = None
    attempts: list[Attempt] = []
    fallback: str | None = None
    summary: str = ""
    usage: Usage = Usage()
    cost_usd: float = 0.0


def message_dict(message: BaseMessage) -> dict[str, str]:
    return {"role": message.type, "content": message.content if isinstance(message.content, str) else str(message.content)}


def answer_text(message: AIMessage) -> str:
    """What the model answered: its tool-call arguments when it called the schema's tool, else its text."""
    if message.tool_calls:
        return json.dumps(message.tool_calls[0]["args"], indent=1)
    return message.content if isinstance(message.content, str) else str(message.content)


def _fence(text: str) -> str:
    ticks = "````" if "```" in text else "```"
    return f"{ticks}\n{text.rstrip()}\n{ticks}"


def render_markdown(steps: list[dict[str, Any]], run_id: str) -> str:
    """The trace for a person: each step with its prompt, answer, tokens and outcome."""
    total = sum((Step.model_validate(s).usage for s in steps), Usage())
    cost = sum(s.get("cost_usd", 0.0) for s in steps)
    lines = [f"# LLM trace of run {run_id}", "",
             f"{len(steps)} steps; tokens: {total.prompt} prompt, {total.completion} completion, {total.total} total; "
             f"cost ${cost:.4f}.", ""]
    for raw in steps:
        step = Step.model_validate(raw)
        title = f"## {step.node}, iteration {step.iteration}: {step.policy}"
        if step.model:
            title += f" ({step.model}, {step.method})"
        lines += [title, ""]
        if step.summary:
            lines += [f"Result: {step.summary}", ""]
        for n, attempt in enumerate(step.attempts, 1):
            lines += [f"### Attempt {n}: {attempt.usage.prompt} prompt + {attempt.usage.completion} completion tokens", ""]
            for m in attempt.messages:
                lines += [f"**{m['role']}**", "", _fence(m["content"]), ""]
            lines += ["**answer**", "", _fence(attempt.answer or "(empty)"), ""]
            lines += [f"Rejected: {attempt.error}" if attempt.error else "Accepted.", ""]
        if step.fallback:
            lines += [f"**Fallback to the offline policy:** {step.fallback}", ""]
    return "\n".join(lines)
