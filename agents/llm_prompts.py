"""The prompts, one Markdown file per role in agents/prompts/: a system part, then the request template.

The request is a `string.Template` (`$name` placeholders), so CUDA braces and JSON need no escaping.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from string import Template

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from sparseditto.settings import Role

PROMPT_DIR = Path(__file__).parent / "prompts"
REQUEST_MARK = "<!-- request -->"


@cache
def _template(role: Role) -> tuple[str, Template]:
    system, mark, request = (PROMPT_DIR / f"{role}.md").read_text().partition(REQUEST_MARK)
    if not mark:
        raise ValueError(f"{role}.md: missing the {REQUEST_MARK} line between the system part and the request")
    return system.strip(), Template(request.strip())


def prompt(role: Role, extra_system: str = "", **fields: str) -> list[BaseMessage]:
    """The role's system message (plus `extra_system`) and its request with `fields` filled in."""
    system, request = _template(role)
    return [SystemMessage(f"{system}\n\n{extra_system}".strip()), HumanMessage(request.substitute(fields))]
