"""The plan: every number DATE derives from a baseline for one target batch, and why.

:func:`derive_plan` turns a validated :class:`~date_engine.spec.Spec` and a target batch into a frozen
:class:`Plan` (Algorithm 1 of You et al., SC'19, as read in spec/DATE.md §2)::

    k   = B / B0                      scale
    η   = √k·η0 | k·η0 | η0           peak LR (sqrt | linear | none scaling)
    w   = k·w0  | w0                  warmup epochs (legw | constant)
    I_w = w·n/B                       warmup iterations (constant under LEGW)
    I   = ceil(B0·I0 / B)             optimizer steps
    E_tot = I0·B0 / n                 total epochs

and :meth:`Plan.lr` is the learning rate at optimizer step ``i`` (1-based), a closed form::

    i <  I_w:  η·(i/I_w)  or  η·(i/I_w)²              (i/I_w = e/w, e = i·B/n the epoch)
    i >= I_w:  max(η·(I − i)/(I − I_w), η̂)

The plan is the single source of these numbers: the CLI, the trainer and the reports all read it.
Invalid plans (spec/DATE.md, "Invalid plans") raise :class:`~date_engine.errors.PlanError`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any, Literal

from date_engine.errors import PlanError
from date_engine.spec import Spec

__all__ = ["Derivation", "Phase", "Plan", "derive_plan"]


@dataclass(frozen=True)
class Derivation:
    """One derived number with the formula it came from and the inputs substituted in."""

    symbol: str
    name: str
    value: float
    formula: str
    inputs: str
    note: str = ""


@dataclass(frozen=True)
class Phase:
    """A stretch of the schedule: ``warmup``, ``decay`` or ``floor``, in steps and epochs."""

    name: Literal["warmup", "decay", "floor"]
    first_step: int
    last_step: int
    first_epoch: float
    last_epoch: float
    first_lr: float
    last_lr: float

    @property
    def steps(self) -> int:
        return self.last_step - self.first_step + 1


@dataclass(frozen=True)
class Plan:
    """Everything DATE derived for one target batch. Frozen, picklable, JSON-able.

    ``lr(step)`` is a pure function of the 1-based optimizer step; nothing else holds state.
    """

    baseline_batch: int
    """B0."""
    target_batch: int
    """B = micro_batch × world_size × accumulation_steps."""
    dataset_size: int
    """n, samples per epoch."""
    baseline_lr: float
    """η0."""
    baseline_warmup_epochs: float
    """w0."""
    baseline_iterations: int
    """I0 (given, or ceil(E·n/B0) from the baseline's epochs)."""
    baseline_epochs: float | None
    """E as the spec gave it, or None when the spec gave I0."""
    scaling: Literal["sqrt", "linear", "none"]
    warmup: Literal["legw", "constant"]
    warmup_shape: Literal["linear", "quadratic"]
    scale: float
    """k = B / B0."""
    peak_lr: float
    """η, the LR at the end of warmup."""
    warmup_epochs: float
    """w."""
    warmup_iterations: float
    """I_w = w·n/B; fractional, as in the paper (117.1875 for LeNet at 8K)."""
    total_iterations: int
    """I, optimizer steps at the target batch."""
    total_epochs: float
    """E_tot = I0·B0/n, the baseline's epochs, unchanged by scaling."""
    lr_floor: float
    """η̂."""
    micro_batch: int
    """Samples per process per forward/backward pass."""
    world_size: int
    """Processes (data-parallel replicas)."""
    accumulation_steps: int
    """Micro-batches accumulated per optimizer step in each process."""
    max_legw_batch: int | None = field(default=None)
    """Largest batch for which LEGW's warmup still ends before training does (None: no limit)."""

    # ---------------------------------------------------------------- the schedule

    def lr(self, step: int) -> float:
        """Learning rate for optimizer step ``step`` (1-based). Steps past the end stay at the floor."""
        if step < 1:
            raise ValueError(f"optimizer steps are counted from 1, got {step}")
        if step < self.warmup_iterations:  # e < w  <=>  i·B/n < w  <=>  i < I_w
            frac = step / self.warmup_iterations
            return self.peak_lr * (frac if self.warmup_shape == "linear" else frac * frac)
        return max(self._decay(step), self.lr_floor)

    def lrs(self) -> list[float]:
        """``lr(i)`` for every step ``i = 1..I``."""
        return [self.lr(i) for i in range(1, self.total_iterations + 1)]

    def epoch(self, step: float) -> float:
        """Epochs completed after ``step`` optimizer steps: e = i·B/n."""
        return step * self.target_batch / self.dataset_size

    def _decay(self, step: int) -> float:
        return (
            self.peak_lr
            * (self.total_iterations - step)
            / (self.total_iterations - self.warmup_iterations)
        )

    @property
    def phases(self) -> tuple[Phase, ...]:
        """The warmup, decay and floor stretches (empty ones left out)."""
        last = self.total_iterations
        first_decay = max(1, math.ceil(self.warmup_iterations))
        # First step whose decayed value is at or below the floor; the closed form can be off by
        # one in floating point, so settle it against _decay itself.
        first_floor = max(
            first_decay,
            math.ceil(last - self.lr_floor * (last - self.warmup_iterations) / self.peak_lr),
        )
        while first_floor > first_decay and self._decay(first_floor - 1) <= self.lr_floor:
            first_floor -= 1
        while self._decay(first_floor) > self.lr_floor:
            first_floor += 1
        spans = (("warmup", 1, first_decay - 1), ("decay", first_decay, first_floor - 1),
                 ("floor", first_floor, last))
        return tuple(
            Phase(name, a, b, self.epoch(a - 1), self.epoch(b), self.lr(a), self.lr(b))
            for name, a, b in spans
            if a <= b
        )

    # ---------------------------------------------------------------- the derivation, shown

    def inputs(self) -> tuple[Derivation, ...]:
        """The baseline values the plan was derived from, with the spec field each came from."""
        return (
            Derivation("B0", "baseline_batch", self.baseline_batch, "baseline.batch_size", "",
                       "baseline batch size"),
            Derivation("η0", "baseline_lr", self.baseline_lr, "baseline.lr", "",
                       "baseline peak learning rate"),
            Derivation("w0", "baseline_warmup_epochs", self.baseline_warmup_epochs,
                       "baseline.warmup_epochs", "", "baseline warmup, epochs"),
            Derivation("E", "baseline_epochs", self.baseline_epochs, "baseline.epochs", "",
                       "baseline epochs")
            if self.baseline_epochs is not None
            else Derivation("I0", "baseline_iterations", self.baseline_iterations,
                            "baseline.iterations", "", "baseline optimizer steps"),
            Derivation("n", "dataset_size", self.dataset_size, "baseline.dataset_size", "",
                       "training samples per epoch"),
            Derivation("η̂", "lr_floor", self.lr_floor, "date.lr_floor", "", "LR floor"),
            Derivation("B", "target_batch", self.target_batch, "--batch", "", "target batch size"),
        )

    def derivations(self) -> tuple[Derivation, ...]:
        """Every derived number with its formula and the inputs substituted in."""
        k, b, b0 = self.scale, self.target_batch, self.baseline_batch
        n, w0, eta0 = self.dataset_size, self.baseline_warmup_epochs, self.baseline_lr
        peak = {
            "sqrt": ("√k · η0", f"√{fmt(k)} · {eta0:.5g}", "sqrt scaling"),
            "linear": ("k · η0", f"{fmt(k)} · {eta0:.5g}", "linear scaling (Goyal et al.)"),
            "none": ("η0", f"{eta0:.5g}", "no scaling"),
        }[self.scaling]
        if self.warmup == "legw":
            warm = ("k · w0", f"{fmt(k)} · {fmt(w0)}", "linear-epoch warmup (LEGW)")
            warm_iters = ("w0 · n / B0", f"{fmt(w0)} · {fmt(n)} / {fmt(b0)}",
                          "= w·n/B: constant across batches")
        else:
            warm = ("w0", fmt(w0), "constant-epoch warmup")
            warm_iters = ("w · n / B", f"{fmt(self.warmup_epochs)} · {fmt(n)} / {fmt(b)}", "")
        exact_i = b0 * self.baseline_iterations / b
        rows = []
        if self.baseline_epochs is not None:
            rows.append(Derivation(
                "I0", "baseline_iterations", self.baseline_iterations, "⌈E · n / B0⌉",
                f"⌈{fmt(self.baseline_epochs)} · {fmt(n)} / {fmt(b0)}⌉", "baseline optimizer steps",
            ))
        rows += [
            Derivation("k", "scale", k, "B / B0", f"{fmt(b)} / {fmt(b0)}"),
            Derivation("η", "peak_lr", self.peak_lr, *peak),
            Derivation("w", "warmup_epochs", self.warmup_epochs, *warm),
            Derivation("I_w", "warmup_iterations", self.warmup_iterations, *warm_iters),
            Derivation("I", "total_iterations", self.total_iterations, "⌈B0 · I0 / B⌉",
                       f"⌈{fmt(b0)} · {fmt(self.baseline_iterations)} / {fmt(b)}⌉"
                       f" = ⌈{fmt(exact_i)}⌉", "same epochs, k× fewer steps"),
            Derivation("E_tot", "total_epochs", self.total_epochs, "I0 · B0 / n",
                       f"{fmt(self.baseline_iterations)} · {fmt(b0)} / {fmt(n)}",
                       "unchanged by scaling"),
        ]
        if self.max_legw_batch is not None:
            rows.append(Derivation(
                "B_max", "max_legw_batch", self.max_legw_batch, "largest B < B0 · E_tot / w0",
                f"{fmt(b0)} · {fmt(self.total_epochs)} / {fmt(w0)}",
                "beyond it LEGW's warmup outlasts training",
            ))
        rows.append(Derivation(
            "A", "accumulation_steps", self.accumulation_steps, "B / (micro_batch · world_size)",
            f"{fmt(b)} / ({fmt(self.micro_batch)} · {fmt(self.world_size)})",
            "micro-batches per optimizer step",
        ))
        return tuple(rows)

    def to_dict(self) -> dict[str, Any]:
        """The plan's fields plus its phases, as plain JSON-able values."""
        out = asdict(self)
        out["phases"] = [asdict(p) for p in self.phases]
        return out


def fmt(value: float) -> str:
    """A number as a person writes it: integers plain, others to 8 significant digits."""
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{value:.8g}"


# ------------------------------------------------------------------------------ derivation


def derive_plan(
    spec: Spec,
    batch: int,
    world_size: int = 1,
    micro_batch: int | None = None,
) -> Plan:
    """Derive the plan for training ``spec``'s baseline at global batch ``batch``.

    ``micro_batch`` (or the spec's ``train.micro_batch``) is the per-process batch of one
    forward/backward pass; by default a process takes its whole share, ``batch / world_size``.
    Raises :class:`PlanError` when no sound plan exists (spec/DATE.md, "Invalid plans").
    """
    base, date = spec.baseline, spec.date
    _require_positive_int("--batch", batch)
    _require_positive_int("--nproc (world size)", world_size)
    if micro_batch is not None:
        _require_positive_int("--micro-batch", micro_batch)
    n = base.dataset_size
    if n is None:
        raise PlanError(
            "baseline.dataset_size is missing and no recipe supplies it; add "
            "'dataset_size: <training samples>' under baseline."
        )
    if batch > n:
        raise PlanError(
            f"batch {batch} is larger than the data set ({n} samples, baseline.dataset_size); "
            f"choose --batch {n} or less."
        )
    b0, eta0, w0 = base.batch_size, base.lr, base.warmup_epochs
    if base.iterations is not None:
        i0 = base.iterations
    else:  # the epochs the user wrote, as the decimal they wrote, so 0.1 epochs stays exact
        i0 = math.ceil(Fraction(repr(base.epochs)) * n / b0)

    k = batch / b0
    peak = {"sqrt": math.sqrt(k) * eta0, "linear": k * eta0, "none": eta0}[date.scaling]
    total_epochs = i0 * b0 / n
    if date.warmup == "legw":
        warmup_epochs = k * w0
        warmup_iterations = w0 * n / b0  # = w·n/B, written so it is bit-identical at every B
        max_batch = math.ceil(b0 * total_epochs / w0) - 1 if w0 > 0 else None
    else:
        warmup_epochs = w0
        warmup_iterations = w0 * n / batch
        max_batch = None
    total_iterations = -(-b0 * i0 // batch)

    if warmup_epochs >= total_epochs:
        raise PlanError(_warmup_too_long(batch, k, w0, warmup_epochs, total_epochs, max_batch))
    if date.lr_floor >= peak:
        raise PlanError(
            f"date.lr_floor ({fmt(date.lr_floor)}) is not below the peak LR ({fmt(peak)}) at "
            f"batch {batch}; lower it (the default is 1e-6)."
        )
    requested_micro = micro_batch if micro_batch is not None else spec.train.micro_batch
    micro, accumulation = split_batch(batch, world_size, requested_micro)

    return Plan(
        baseline_batch=b0,
        target_batch=batch,
        dataset_size=n,
        baseline_lr=eta0,
        baseline_warmup_epochs=w0,
        baseline_iterations=i0,
        baseline_epochs=base.epochs,
        scaling=date.scaling,
        warmup=date.warmup,
        warmup_shape=date.warmup_shape,
        scale=k,
        peak_lr=peak,
        warmup_epochs=warmup_epochs,
        warmup_iterations=warmup_iterations,
        total_iterations=total_iterations,
        total_epochs=total_epochs,
        lr_floor=date.lr_floor,
        micro_batch=micro,
        world_size=world_size,
        accumulation_steps=accumulation,
        max_legw_batch=max_batch,
    )


def split_batch(batch: int, world_size: int, micro_batch: int | None) -> tuple[int, int]:
    """Split ``batch`` into (micro_batch, accumulation_steps) for ``world_size`` processes.

    ``batch == micro_batch × world_size × accumulation_steps`` exactly, or :class:`PlanError`
    naming values that would work.
    """
    if batch % world_size:
        sizes = [d for d in _divisors(batch) if d <= max(2 * world_size, 8)]
        lower, upper = (batch // world_size) * world_size, -(-batch // world_size) * world_size
        raise PlanError(
            f"batch {batch} does not divide evenly over {world_size} processes; use a batch of "
            f"{_either(lower, upper)}, or --nproc {_list(sizes)}."
        )
    per_process = batch // world_size
    if micro_batch is None:
        return per_process, 1
    if micro_batch > per_process:
        raise PlanError(
            f"micro-batch {micro_batch} is larger than each process's share of the batch "
            f"({batch} / {world_size} = {per_process}); use --micro-batch {per_process} or less."
        )
    if per_process % micro_batch:
        below = max(d for d in _divisors(per_process) if d <= micro_batch)
        above = min(d for d in _divisors(per_process) if d >= micro_batch)
        options = sorted({below, above})
        raise PlanError(
            f"batch {batch} cannot be split as micro-batch {micro_batch} × {world_size} "
            f"processes × whole accumulation steps ({per_process} per process is not a multiple "
            f"of {micro_batch}); micro-batches that work: "
            + ", ".join(f"{m} ({per_process // m} accumulation steps)" for m in options)
            + "."
        )
    return micro_batch, per_process // micro_batch


def _warmup_too_long(batch, k, w0, w, total, max_batch) -> str:
    if w0 >= total:  # the baseline itself never finishes warming up
        return (
            f"baseline.warmup_epochs ({fmt(w0)}) is not shorter than the whole baseline run "
            f"({fmt(total)} epochs), so warmup would never finish; shorten it or train for more "
            "epochs."
        )
    return (
        f"batch {batch} is too large for LEGW with this baseline: warmup would last "
        f"k·w0 = {fmt(k)} × {fmt(w0)} = {fmt(w)} epochs but training lasts {fmt(total)} "
        f"epochs; LEGW fits up to batch {max_batch}. Choose a smaller --batch, train the "
        "baseline for more epochs, or shorten baseline.warmup_epochs."
    )


def _require_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{name} must be a positive whole number, got {value!r}.")


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _either(a: int, b: int) -> str:
    return str(a) if a == b else (str(b) if a == 0 else f"{a} or {b}")


def _list(values: list[int]) -> str:
    return ", ".join(map(str, values[:-1])) + f" or {values[-1]}" if len(values) > 1 else str(values[0])
