"""The one checked reader of another tool's configuration (HF's TrainingArguments, timm's
args.yaml, a nanoGPT config): each field's type, finiteness and range, every failure one sentence
naming the field as the configuration names it (:mod:`date_engine.baselines`,
:mod:`date_engine.stacks`). Torch-free."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from date_engine.errors import SpecError

__all__ = ["MOST", "Fields", "counts"]

MOST = 1e9
"""The largest count (samples, steps) and the default upper bound of a value read."""


class Fields:
    """One configuration's fields (a TrainingArguments, its JSON as a dict, timm's args.yaml, the
    values of a nanoGPT config),
    each read and checked here: its type, finiteness and range, so that every bad value is one
    sentence naming the field as the user wrote it (``source``: where it came from)."""

    def __init__(self, args: Any, source: str, defaults: Mapping[str, Any] | None = None):
        self.args, self.source, self.defaults = args, source, defaults or {}

    def raw(self, key: str, default: Any = None) -> Any:
        """The value as given (an enum's value), or the default where absent or None."""
        default = self.defaults.get(key, default)
        if isinstance(self.args, Mapping):
            value = self.args.get(key, default)
        else:
            value = getattr(self.args, key, default)
        value = getattr(value, "value", value)  # HF's enums (SchedulerType, OptimizerNames)
        return default if value is None else value

    def refuse(self, key: str, what: str, value: Any) -> SpecError:
        return SpecError(f"{self.source}: {key} must be {what}, got {value!r}.")

    def number(self, key: str, default: Any = None, *, low: float = 0.0, high: float = MOST,
               above: bool = False, whole: bool = False, value: Any = None) -> Any:
        """``key``'s value (or ``value``, an element of its list): a finite number in
        [low, high] ((low, high] with ``above``), a whole one with ``whole``."""
        value = self.raw(key, default) if value is None else value
        kind = "a whole number" if whole else "a number"
        what = f"{kind} {'above' if above else 'from'} {low:g} {'and up ' if above else ''}to " \
               f"{high:g}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.refuse(key, what, value)
        if not math.isfinite(value) or not (low < value if above else low <= value) \
                or value > high or (whole and value != int(value)):
            raise self.refuse(key, what, value)
        return int(value) if whole else float(value)

    def count(self, key: str, default: Any = None) -> int:
        """A positive whole number (a batch, a number of steps)."""
        return self.number(key, default, low=1, whole=True)

    def text(self, key: str, default: str) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str):
            raise self.refuse(key, "a name (text)", value)
        return value

    def flag(self, key: str) -> bool:
        value = self.raw(key, False)
        if not isinstance(value, bool):
            raise self.refuse(key, "true or false", value)
        return value

    def mapping(self, key: str) -> Fields:
        """A mapping inside the configuration (HF's scheduler kwargs; JSON text as HF's command
        line gives it), read with the same checks, its keys named ``key.name``."""
        value = self.raw(key, None) or {}
        if isinstance(value, str):
            import json

            try:
                value = json.loads(value)
            except ValueError:
                raise self.refuse(key, "a mapping (a JSON object)", value) from None
        if not isinstance(value, Mapping):
            raise self.refuse(key, "a mapping (a JSON object)", value)
        return Fields(value, f"{self.source}: {key}")

    def numbers(self, key: str, length: int | None = None, **bounds: Any) -> list[Any]:
        """A list of numbers, each checked as :meth:`number` checks one."""
        value = self.raw(key, None)
        if not isinstance(value, (list, tuple)) or not value or \
                (length is not None and len(value) != length):
            raise self.refuse(key, f"a list of {length or 'one or more'} numbers", value)
        return [self.number(key, value=v, **bounds) for v in value]

    def __contains__(self, key: str) -> bool:
        return self.raw(key, None) is not None


def counts(where: str, train_samples: Any, world_size: Any) -> None:
    """A reader's ``train_samples`` and ``world_size`` checked (``where``: the reader's name)."""
    if isinstance(train_samples, bool) or not isinstance(train_samples, int) or \
            not 1 <= train_samples <= MOST:
        raise SpecError(f"{where}: train_samples must be the number of training samples (a "
                        f"whole number from 1 to {MOST:g}), got {train_samples!r}.")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or \
            not 1 <= world_size <= 1 << 20:
        raise SpecError(f"{where}: world_size must be a positive int (the processes the baseline "
                        f"ran on), got {world_size!r}.")
