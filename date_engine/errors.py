"""Errors a user can cause and fix.

Every error raised for bad input derives from :class:`DateError` and carries one sentence that
names the file or field at fault and what to do about it. The CLI prints that sentence and exits
with code 2; library callers catch :class:`DateError`. Anything else that escapes is a bug.
"""

from __future__ import annotations

__all__ = ["DateError", "SpecError", "PlanError"]


class DateError(Exception):
    """A mistake in the user's input, explained in one sentence."""


class SpecError(DateError):
    """The baseline YAML, or an override of it, is missing, malformed or invalid."""


class PlanError(DateError):
    """The spec is valid, but no sound plan exists for the requested batch or split."""
