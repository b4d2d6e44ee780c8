"""User-facing errors. The CLI prints these as one line with an exit code; anything else is a bug."""


class SparseDittoError(Exception):
    """Base of every error caused by the user's input or environment, with a message that says what to change."""

    exit_code = 2


class SpecError(SparseDittoError):
    """The spec is malformed, names an unknown value, or asks for something not implemented yet."""


class NotImplementedFamilyError(SpecError):
    """The spec is valid but its problem family has no implementation yet."""


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
