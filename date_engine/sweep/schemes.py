"""The scaling schemes a sweep compares, each as a change to the baseline spec.

A scheme says how to train the baseline at another batch. It is a function of the spec (as a plain
mapping) and, for the schemes that have no baseline LR to scale from, a peak LR from a grid:

- ``date``: what ``date scale`` does by default: the optimizer family's rule (docs/algorithm.md
  §6) — peak LR k^p·η0, the second-moment decay, ε and decoupled weight decay scaled with k —
  LEGW warmup (k·w0 epochs), linear decay to the floor, the spec's per-layer ratios. A
  ``date.scaling`` or ``date.warmup`` the spec gives is kept, as ``date scale`` keeps it.
- ``paper``: the SC'19 rule as printed: √k LR, LEGW warmup, the same decay, the spec's ratios,
  the optimizer's options unchanged (``date.rule: paper``).
- ``linear``: linear scaling + constant-epoch warmup + the baseline's own decay, ratios off: what
  practitioners do today (Goyal et al.).
- ``none``: the baseline's LR and warmup epochs unchanged, ratios off.
- ``lars``, ``lamb``: those optimizers (docs/algorithm.md §4) at each LR of the grid, LEGW warmup.
- ``adam``: Adam at each LR of the grid, LEGW warmup: the tuned-Adam comparison; the sweep keeps
  the best LR per batch.

The baseline itself (the cells at B0) is the spec as written with the per-layer ratios off: the
small-batch run the user already has.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from date_engine.catalog import entry
from date_engine.errors import DateError
from date_engine.spec import Spec, parse_spec

__all__ = ["BASELINE", "BUDGETS", "DEFAULT_LR_GRID", "SCHEMES", "Scheme", "budget_label",
           "parse_budgets", "parse_schemes", "scheme_spec", "split_label"]

Raw = dict[str, Any]


@dataclass(frozen=True)
class Scheme:
    name: str
    summary: str
    """One line for the report: what the scheme does."""
    apply: Callable[[Raw, float | None], Raw]
    """(spec mapping, grid LR or None) -> the spec mapping of a cell."""
    uses_grid: bool = False
    """True: run at every LR of the grid and keep the best per batch."""


def _rule(name: str) -> Callable[[Raw, float | None], Raw]:
    """DATE with ``name``'s rule (date or paper), the spec's ratios. ``date`` is what ``date scale``
    does with the spec, so an LR scaling or warmup the spec gives is kept (:data:`DATE_SETTABLE`);
    ``paper`` is the rule as printed: √k and LEGW whatever the spec says."""
    def apply(raw: Raw, lr: float | None) -> Raw:
        out = _with(raw, {"date": {"rule": name}})
        if name != "date":
            for key in DATE_SETTABLE:
                out["date"].pop(key, None)
        return out

    return apply


def _linear(raw: Raw, lr: float | None) -> Raw:
    return _ratios_off(_with(raw, {"date": {"rule": "paper", "scaling": "linear",
                                            "warmup": "constant"}}))


def _none(raw: Raw, lr: float | None) -> Raw:
    return _ratios_off(_with(raw, {"date": {"rule": "paper", "scaling": "none",
                                            "warmup": "constant"}}))


def _optimizer(name: str) -> Callable[[Raw, float | None], Raw]:
    """The optimizer ``name`` at its catalog defaults (the baseline's weight decay kept) at a grid
    LR, with LEGW's warmup and no DATE ratios."""
    def apply(raw: Raw, lr: float | None) -> Raw:
        assert lr is not None
        weight_decay = raw["baseline"].get("optimizer", {}).get("weight_decay")
        optimizer: Raw = {"name": name}
        if weight_decay is not None:
            optimizer["weight_decay"] = weight_decay
        out = _with(raw, {"baseline": {"lr": lr},
                          "date": {"rule": "paper", "scaling": "none", "warmup": "legw"}})
        out["baseline"]["optimizer"] = optimizer
        return _ratios_off(out)

    return apply


def _defaults(name: str) -> str:
    """The catalog's momentum or betas of ``name``, for a scheme's one-line description."""
    defaults = entry(name).defaults
    if "betas" in defaults:
        return "β = " + ", ".join(f"{b:g}" for b in defaults["betas"])
    return f"momentum {defaults['momentum']:g}"


def baseline(raw: Raw) -> Raw:
    """The baseline cell's spec: as written, without DATE's per-layer ratios or the settings that
    are moot at the baseline's batch (:data:`MOOT_AT_B0`)."""
    out = _ratios_off(copy.deepcopy(raw))
    for key in MOOT_AT_B0:
        out.get("date", {}).pop(key, None)
    return out


BASELINE = "baseline"
DEFAULT_LR_GRID = "1e-4,3e-4,1e-3,3e-3,1e-2"
"""Peak LRs tried by the schemes that search one (lars, lamb, adam)."""

SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("date", "DATE's default rule (docs/algorithm.md §6): the optimizer family's peak LR "
                   "k^p·η0 (its steps-limited p where the probe's LR check fires), its "
                   "second-moment decay, ε and decoupled weight decay scaled with k, "
                   "LEGW warmup (k·w0 epochs), linear decay to the floor, the spec's per-layer "
                   "ratios", _rule("date")),
    Scheme("paper", "the paper's rule: √k·η0, LEGW warmup (k·w0 epochs), linear decay to the "
                    "floor, the spec's per-layer ratios, the optimizer's options unchanged",
           _rule("paper")),
    Scheme("linear", "linear scaling k·η0, constant warmup (w0 epochs), the same decay, no "
                     "per-layer ratios (Goyal et al.)", _linear),
    Scheme("none", "η0 and w0 epochs of warmup unchanged, the same decay, no per-layer ratios",
           _none),
    *(Scheme(name, f"{title} ({_defaults(name)}) at each LR of the grid, LEGW warmup, the same "
                   f"decay; best LR kept{extra}", _optimizer(name), uses_grid=True)
      for name, title, extra in (("lars", "LARS", ""), ("lamb", "LAMB", ""),
                                 ("adam", "Adam", " (the tuned-Adam comparison)"))),
)}


SCHEME_OWNED = ("rule", "scaling", "warmup")
"""The date settings the schemes set for themselves: ``rule`` always; ``scaling`` and ``warmup``
every scheme but ``date`` (:data:`DATE_SETTABLE`)."""

MOOT_AT_B0 = (*SCHEME_OWNED, "second_moment", "weight_decay", "lr_cap")
"""Date settings that change nothing at k = 1 (k^p = 1, k·w0 = w0, β2^1 = β2, ε/√1, λ·1): the
baseline cells leave them out, so sweeps that differ only in them share their baseline cells."""

DATE_SETTABLE = ("scaling", "warmup")
"""Settings the ``date`` scheme takes from the spec when it gives them (as ``date scale`` does):
``--set date.scaling=sqrt`` trains the default rule with the paper's LR exponent."""


def given_settings(spec: Spec, keys: tuple[str, ...] = SCHEME_OWNED) -> list[str]:
    """``date.<key>=<value>`` for each of ``keys`` the spec gives explicitly."""
    return [f"date.{key}={getattr(spec.date, key)}" for key in keys
            if key in spec.date.model_fields_set]


def unused_settings(spec: Spec, schemes: list[str]) -> list[str]:
    """The spec's :data:`SCHEME_OWNED` settings that reach none of ``schemes``' cells (beyond the
    baseline's, where k = 1 makes them moot)."""
    reached = DATE_SETTABLE if "date" in schemes else ()
    return given_settings(spec, tuple(k for k in SCHEME_OWNED if k not in reached))


def unused_note(spec: Spec, schemes: list[str]) -> str | None:
    """The sentence a sweep starts with where the spec sets :func:`unused_settings`, else None."""
    unused = unused_settings(spec, schemes)
    if not unused:
        return None
    return (f"{', '.join(unused)} reaches no scheme's cells: the schemes (--schemes) set their "
            "own rule, and every one but date its own LR scaling and warmup; to compare the "
            "default rule's settings, sweep the date scheme with them.")


def scheme_spec(spec: Spec, scheme: Scheme, lr: float | None = None,
                source: str = "<scheme>") -> Spec:
    """``spec`` trained the way ``scheme`` says (at grid LR ``lr`` for grid schemes)."""
    raw = scheme.apply(spec.model_dump(mode="json", exclude_none=True), lr)
    return parse_spec(raw, source=source)


def parse_schemes(text: str) -> list[Scheme]:
    """``"date,linear"`` -> the schemes, in the order given, each once."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise DateError(f"--schemes: no scheme named; choose from {', '.join(SCHEMES)}.")
    unknown = [n for n in names if n not in SCHEMES]
    if unknown:
        raise DateError(
            f"--schemes: unknown scheme '{unknown[0]}'; choose from {', '.join(SCHEMES)}."
        )
    return [SCHEMES[n] for n in dict.fromkeys(names)]


BUDGETS: dict[str, tuple[Raw, str]] = {
    "same-epochs": ({"budget": "same-epochs"},
                    "the baseline's epochs at the batch (k× fewer steps)"),
    "hold": ({"budget": "hold"},
             "the epochs the probe forecasts the batch needs for the baseline's loss"),
    "ramp": ({"budget": "ramp", "ramp": "measured"},
             "a batch that doubles from B0 up to the batch as the noise scale the run measures "
             "grows (date.ramp: measured)"),
    "ramp-planned": ({"budget": "ramp", "ramp": "planned"},
                     "the batch ramp where the probe's curve puts each rung (date.ramp: planned)"),
}
"""The budgets ``date sweep --budgets`` compares: each one's ``date`` settings (docs/noise.md)
and what it trains."""


def parse_budgets(text: str) -> list[str]:
    """``"same-epochs,ramp"`` -> the budgets, in the order given, each once."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in BUDGETS]
    if not names or unknown:
        what = f"unknown budget '{unknown[0]}'" if unknown else "no budget named"
        raise DateError(f"--budgets: {what}; choose from {', '.join(BUDGETS)}.")
    return list(dict.fromkeys(names))


def budget_label(scheme: str, budget: str | None) -> str:
    """The name a sweep gives ``scheme`` trained with ``budget`` (the scheme's own without)."""
    return scheme if budget is None else f"{scheme}+{budget}"


def split_label(label: str) -> tuple[str, str | None]:
    """(scheme, budget or None) of a :func:`budget_label`."""
    scheme, _, budget = label.partition("+")
    return scheme, budget or None


def _ratios_off(raw: Raw) -> Raw:
    raw.setdefault("date", {})["layer_ratio"] = {"mode": "off"}  # whole: mode options go with it
    return raw


def _with(raw: Raw, changes: Raw) -> Raw:
    """A deep copy of ``raw`` with ``changes`` merged in, section by section."""
    out = copy.deepcopy(raw)

    def merge(into: Raw, new: Raw) -> None:
        for key, value in new.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = copy.deepcopy(value)

    merge(out, changes)
    return out
