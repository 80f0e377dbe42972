"""Line charts drawn in the terminal with braille dots (2×4 dots per character cell)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.text import Text

__all__ = ["Series", "line_chart"]

# Bit of each dot in a braille cell, indexed [column][row], rows top to bottom (Unicode 2800–28FF).
_DOT = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
_BLANK = 0x2800


@dataclass(frozen=True)
class Series:
    label: str
    y: Callable[[int], float]
    """The value at integer x (x runs over 1..x_max)."""
    style: str


def line_chart(
    series: Sequence[Series],
    x_max: int,
    width: int = 64,
    height: int = 10,
    y_max: float | None = None,
    y_format: Callable[[float], str] = "{:.3g}".format,
    x_label: str = "step",
) -> Text:
    """Plot each series over x = 1..x_max in a ``width`` × ``height`` character box.

    The y axis runs from 0 to ``y_max`` (default: the largest value drawn).
    """
    cols, rows = 2 * width, 4 * height
    xs = [1 + round(c * (x_max - 1) / max(cols - 1, 1)) for c in range(cols)]
    values = [[s.y(x) for x in xs] for s in series]
    top = y_max or max((max(v) for v in values), default=0.0) or 1.0
    cells = [[[0] * len(series) for _ in range(width)] for _ in range(height)]
    for k, ys in enumerate(values):
        prev = None
        for c, y in enumerate(ys):
            r = round((1.0 - y / top) * (rows - 1))
            lo, hi = (r, r) if prev is None else (min(prev, r), max(prev, r))
            for rr in range(lo, hi + 1):  # join to the previous column so steep edges stay drawn
                cells[rr // 4][c // 2][k] |= _DOT[c % 2][rr % 4]
            prev = r

    labels = {0: y_format(top), height // 2: y_format(top / 2), height - 1: y_format(0.0)}
    pad = max(len(v) for v in labels.values())
    text = Text()
    for row in range(height):
        text.append(f"{labels.get(row, ''):>{pad}} ┤" if row in labels else " " * pad + " │",
                    style="dim")
        for cell in cells[row]:
            bits = 0
            for b in cell:
                bits |= b
            owners = [k for k, b in enumerate(cell) if b]
            style = series[owners[0]].style if len(owners) == 1 else ("bold" if owners else "")
            text.append(chr(_BLANK + bits), style=style)
        text.append("\n")
    right = str(x_max)
    text.append(" " * pad + " └" + "─" * width + "\n", style="dim")
    text.append(" " * (pad + 2) + "1" + x_label.center(width - 1 - len(right)) + right, style="dim")
    if len(series) > 1:
        text.append("\n" + " " * (pad + 2))
        for s in series:
            text.append("⣿ ", style=s.style)
            text.append(f"{s.label}   ")
    return text
