"""Chat models for the LLM policy: `ChatOpenAI` on any OpenAI-compatible endpoint, one model per role.

Chat completions, not the responses API, so that vLLM, Ollama and LM Studio work like OpenAI. Local
servers ignore the API key, but the client requires one: a placeholder is sent when none is set.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI

from sparseditto.errors import PolicyError
from sparseditto.settings import Role, Settings

ModelFactory = Callable[[Role], BaseChatModel]
_NO_KEY = "not-needed"


def check_usable(settings: Settings) -> None:
    """Refuse an LLM policy that has no model to talk to, before the run starts."""
    missing = [role for role in ("planner", "coder", "reviewer") if not settings.model_for(role)]
    if missing:
        raise PolicyError(f"the llm policy needs a model for {', '.join(missing)}: set SPARSEDITTO_LLM_MODEL "
                          "(or --model) and, for a server other than OpenAI, SPARSEDITTO_LLM_BASE_URL (or --base-url)")
    if not settings.llm_base_url and not settings.llm_api_key:
        raise PolicyError("the llm policy needs an endpoint: set SPARSEDITTO_LLM_BASE_URL (or --base-url), "
                          "or OPENAI_API_KEY for OpenAI itself")


def chat_model(settings: Settings, role: Role, **overrides: object) -> ChatOpenAI:
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else _NO_KEY
    options: dict[str, object] = {
        "model": settings.model_for(role),
        "base_url": settings.llm_base_url,
        "api_key": key,
        "temperature": settings.llm_temperature,
        "timeout": settings.llm_timeout_s,
        "max_retries": settings.llm_max_retries,
        "use_responses_api": False,
    }
    return ChatOpenAI(**{**options, **overrides})


def ping(settings: Settings, timeout_s: float = 10.0) -> str:
    """Whether the endpoint answers: a one-token completion from the coder's model, or why it failed."""
    import openai

    model = chat_model(settings, "coder", max_tokens=1, max_retries=0, timeout=timeout_s)
    start = time.perf_counter()
    try:
        model.invoke("Answer with one word: ready?")
    except openai.OpenAIError as exc:
        return f"no answer: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return f"answers ({(time.perf_counter() - start) * 1e3:.0f} ms)"
