"""Errors a user can cause and fix.

Every error raised for bad input derives from :class:`DateError` and carries one sentence that
names the file or field at fault and what to do about it. The CLI prints that sentence and exits
with code 2; library callers catch :class:`DateError`. Anything else that escapes is a bug.
"""

from __future__ import annotations

__all__ = ["DataError", "DataMissing", "DateError", "PlanError", "SpecError"]


class DateError(Exception):
    """A mistake in the user's input, explained in one sentence."""


class SpecError(DateError):
    """The baseline YAML, or an override of it, is missing, malformed or invalid."""


class PlanError(DateError):
    """The spec is valid, but no sound plan exists for the requested batch or split."""


class DataError(DateError):
    """A data set on disk is malformed: the file and what is wrong with it."""


class DataMissing(DataError):
    """The data set's files are not where the recipe looks: every expected path, listed."""
