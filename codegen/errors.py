"""Errors of the code generator; each is one line for the CLI (see taso_py.errors)."""

from taso_py.errors import TasoError


class ScheduleError(TasoError):
    """A schedule primitive was applied where it cannot be (the message names stage and axis)."""


class CodegenError(TasoError):
    """Code could not be generated, compiled or loaded (no compiler, an unsupported construct)."""
