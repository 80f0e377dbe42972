"""Errors a user can cause and fix.

Every error raised for bad input derives from :class:`DateError` and carries one sentence that
names the file or field at fault and what to do about it. The CLI prints that sentence and exits
with code 2; library callers catch :class:`DateError`. Anything else that escapes is a bug.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["ArgumentError", "DataError", "DataMissing", "DateError", "PlanError", "SpecError",
           "as_command_line", "expect", "named"]


class DateError(Exception):
    """A mistake in the user's input, explained in one sentence."""


class SpecError(DateError):
    """The baseline YAML, or an override of it, is missing, malformed or invalid."""


class PlanError(DateError):
    """The spec is valid, but no sound plan exists for the requested batch or split."""


class ArgumentError(DateError, TypeError):
    """A Python caller passed an argument of the wrong type: the function, the parameter, what it
    takes and what it got."""


class DataError(DateError):
    """A data set on disk is malformed: the file and what is wrong with it."""


class DataMissing(DataError):
    """The data set's files are not where the recipe looks: every expected path, listed."""


def expect(value: object, kinds: type | tuple[type, ...], parameter: str, what: str) -> None:
    """Refuse ``value`` unless it is one of ``kinds``: a DateError saying, in one sentence, which
    ``parameter`` (``"plan_for: spec"``) wants ``what`` and what it got instead."""
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise ArgumentError(f"{parameter} must be {what}, got {value!r}.")
    if not isinstance(value, kinds):
        got = repr(value) if isinstance(value, (str, int, float)) or value is None else \
            f"a {type(value).__name__}"
        raise ArgumentError(f"{parameter} must be {what}, got {got}.")


_COMMAND_LINE = contextvars.ContextVar("date_engine_command_line", default=False)


@contextlib.contextmanager
def as_command_line() -> Iterator[None]:
    """Within it, :func:`named` gives the command line's flags (the CLI and its training
    processes); outside, the Python parameters."""
    token = _COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE.reset(token)


def named(parameter: str, flag: str, value: object = None) -> str:
    """How an error names an input: ``flag`` (``--nproc 8``) on the command line,
    ``parameter`` (``devices=8``) to a Python caller; with ``value``, as it would be given."""
    if _COMMAND_LINE.get():
        return flag if value is None else f"{flag} {value}"
    return parameter if value is None else f"{parameter}={value!r}"
