"""Lines for the terminal whose words are the user's or a file's: never read as rich markup (so
``pip install -e '.[plot]'`` keeps its ``[plot]``)."""

from __future__ import annotations

from rich.text import Text

__all__ = ["BRANCHES_DOC", "LR_CHECK_DOC", "NOISE_DOC", "bytes_text", "error_line", "note_line"]

NOISE_DOC = "docs/noise.md#how-sure-the-forecast-is"
"""Where a forecast's how-sure line sends a user: the held-out misses of B_hold's constant."""
LR_CHECK_DOC = "docs/noise.md#the-lr-check"
"""Where a steps-limited verdict is explained."""
BRANCHES_DOC = "docs/branches.md#what-the-plan-does-with-it"
"""Where a forecast from the probe's branches is explained."""


def error_line(message: str) -> Text:
    """``error: <message>``, the label in red."""
    return Text.assemble(("error:", "red"), " ", message)


def note_line(message: str) -> Text:
    """``note: <message>``, the label in yellow."""
    return Text.assemble(("note:", "yellow"), " ", message)


def nonfinite_message(step: int, loss: float | None, last: tuple | None) -> str:
    """Why a run stopped non-finite, and what to do: the loss (or gradients) of ``step`` when
    ``loss`` is given, else the state after ``step``; ``last``: (path, step) of the last good
    checkpoint, if any."""
    import math

    where = (f"the last good checkpoint is {last[0]} (step {last[1]})" if last
             else "no finite state was left to write a checkpoint of")
    if loss is None:
        what = (f"the weights or optimizer state became non-finite by step {step} (the loss "
                "stayed finite); stopped")
    else:
        what = (f"the loss became non-finite ({loss})" if not math.isfinite(loss) else
                f"the gradients became non-finite (the loss read {loss:.4g})")
        what += f" at step {step}; stopped without taking that step"
    return (f"{what}, and {where}. Lower baseline.lr, set train.grad_clip, or check the data, "
            "then resume with --resume.")


def bytes_text(count: float) -> str:
    """A size in KiB, MiB or GiB (3 significant digits), or bytes."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{count:.0f} B"
