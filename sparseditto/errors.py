"""User-facing errors. The CLI prints these as one line with an exit code; anything else is a bug."""

from __future__ import annotations

from typing import Any

# the most characters of the user's own input that one piece of an error message quotes
CLIP = 60
# the longest message a SpecError carries (a safety net: the pieces are clipped where they are written)
MAX_MESSAGE = 400


def clip(text: str, limit: int = CLIP) -> str:
    """`text` cut to `limit` characters with "…" at the end, on one line."""
    cut = len(text) > limit
    text = text[:limit]
    if not text.isprintable():  # control characters (a newline, a terminal escape) shown escaped
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
        cut = cut or len(text) > limit
    return text[: limit - 1] + "…" if cut else text


def clip_path(path: object, limit: int = 100) -> str:
    """A file path as an error names it: whole, or its last `limit` characters after "…"."""
    text = clip(str(path), 10**6)
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def shown(value: Any, limit: int = CLIP) -> str:
    """A value of the user's input as an error quotes it: its repr, clipped (never the whole input)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    return clip(_bounded_repr(value, limit + 1, 0), limit)


def _bounded_repr(value: Any, budget: int, depth: int) -> str:
    """repr(value) up to about `budget` characters, without building the repr of a huge, deep or
    self-referencing container first."""
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        if depth > 3:
            return "…"
        items = value.items() if isinstance(value, dict) else value
        parts: list[str] = []
        used = 0
        for item in items:
            if used > budget:
                parts.append("…")
                break
            part = (f"{_bounded_repr(item[0], budget, depth + 1)}: {_bounded_repr(item[1], budget, depth + 1)}"
                    if isinstance(value, dict) else _bounded_repr(item, budget, depth + 1))
            parts.append(part)
            used += len(part) + 2
        text = ", ".join(parts)
        return "{" + text + "}" if isinstance(value, (dict, set, frozenset)) else "[" + text + "]"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return shown(value)
    if isinstance(value, (str, bytes)) and len(value) > budget:
        value = value[:budget]
    try:
        return repr(value)[: budget + 1]
    except Exception:  # noqa: BLE001 - a broken __repr__ of an object given through the Python API
        return f"<{type(value).__name__}>"


class SparseDittoError(Exception):
    """Base of every error caused by the user's input or environment, with a message that says what to change."""

    exit_code = 2


class SpecError(SparseDittoError):
    """The spec is malformed, names an unknown value, or asks for something not implemented yet.

    `field` is the spec field the error is about (dotted, as the user wrote it) when there is one."""

    def __init__(self, message: str, field: str | None = None) -> None:
        message = " ".join(str(message).split("\n"))
        super().__init__(clip(message, MAX_MESSAGE))
        self.field = field


class NotImplementedFamilyError(SpecError):
    """The spec is valid but its problem family has no implementation yet."""


class SettingsError(SparseDittoError):
    """A SPARSEDITTO_* environment variable with a value the setting does not allow."""


class RunNotFoundError(SparseDittoError):
    """A run id that has no checkpoint or artifact folder."""


class ResumeError(SparseDittoError):
    """A resume command that does not fit the run's state (nothing to resume, wrong answer)."""


class PolicyError(SparseDittoError):
    """An agent policy that is unknown or not usable here (for example llm without an endpoint)."""


class EvalError(SparseDittoError):
    """A suite that cannot be read or an evaluation that cannot start (bad options, existing results)."""


class KnowledgeBaseError(SparseDittoError):
    """A knowledge-base command with a filter or value that names nothing known."""


class RunOptionError(SparseDittoError, ValueError):
    """A run option of the Python API outside its allowed values (run id, on_budget); the message names it."""


class RunsDirError(SparseDittoError):
    """A runs dir that is not a writable folder."""
