"""Lines for the terminal whose words are the user's or a file's: never read as rich markup (so
``pip install 'date-engine[plot]'`` keeps its ``[plot]``)."""

from __future__ import annotations

from rich.text import Text

__all__ = ["error_line", "note_line"]


def error_line(message: str) -> Text:
    """``error: <message>``, the label in red."""
    return Text.assemble(("error:", "red"), " ", message)


def note_line(message: str) -> Text:
    """``note: <message>``, the label in yellow."""
    return Text.assemble(("note:", "yellow"), " ", message)
