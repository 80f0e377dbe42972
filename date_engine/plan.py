"""The plan: every number DATE derives from a baseline for one target batch, and why.

:func:`derive_plan` turns a validated :class:`~date_engine.spec.Spec` and a target batch into a
frozen :class:`Plan` (Algorithm 1 of You et al., SC'19, as read in docs/algorithm.md §2)::

    k   = B / B0                      scale
    η   = k^p·η0                      peak LR: p = ½ (the paper's sqrt), 1 (linear), 0 (none), or
                                      the optimizer family's p (the default rule, §6)
    w   = k·w0  | w0                  warmup epochs (legw | constant)
    I_w = w·n/B                       warmup iterations (constant under LEGW)
    E0  = I0·B0 / n                   the baseline's epochs
    f   = E_B / E0                    forecast epoch factor, from a probe (forecast.py)
    E_tot = E0 | f·E0                 total epochs (budget same-epochs | hold)
    I   = ceil(B0·I0 / B) | ceil(E_tot·n / B)   optimizer steps

and :meth:`Plan.lr` is the learning rate at optimizer step ``i`` (1-based), a closed form::

    i <  I_w:  η·(i/I_w)  or  η·(i/I_w)²              (i/I_w = e/w, e = i·B/n the epoch)
    i >= I_w:  max(η·(I − i)/(I − I_w), η̂)

Each derived number is recorded with its formula and inputs by the line that computes it
(:class:`Derivation`), so what ``date plan`` shows cannot drift from what runs.

:func:`~date_engine.planning.plan_for` (planning.py) calls it for every run, beside the batch's
split. Invalid plans (docs/algorithm.md §2, "Plans that are refused") raise
:class:`~date_engine.errors.PlanError`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field, fields
from fractions import Fraction
from typing import Any, Literal

from date_engine.branches import Measurement, TargetSettings
from date_engine.catalog import BatchRule, OptimizerSettings, entry
from date_engine.errors import PlanError, expect, named
from date_engine.forecast import CriticalCurve, Forecast, NoiseCurve, forecast
from date_engine.ramp import Change, Rung, follow, ramp
from date_engine.shapes import Schedule
from date_engine.spec import LR_FLOOR, MAX_STEPS, Spec

__all__ = [
    "BatchStage",
    "Derivation",
    "OptimizerSettings",
    "Phase",
    "Plan",
    "derive_plan",
    "document_id",
    "fmt",
    "positive_int",
    "require_spec",
    "samples_per_epoch",
]


@dataclass(frozen=True)
class Derivation:
    """One derived number with the formula it came from and the inputs substituted in."""

    symbol: str
    name: str
    value: Any
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


@dataclass(frozen=True, kw_only=True)
class BatchStage(Rung):
    """One rung of a batch ramp (``date.budget: ramp``, :mod:`date_engine.ramp`) with every value
    the plan derives from the batch, derived at this rung's batch."""

    scale: float
    """k_j = B_j / B0."""
    peak_lr: float
    """η_j = k_j^p · η0: the LR the schedule's shape multiplies during this stage."""
    options: dict[str, Any]
    """The base optimizer's options at this batch (the rule's β2, ε, λ at k_j)."""


@dataclass(frozen=True)
class Plan:
    """Everything DATE derived for one target batch. Frozen, picklable, JSON-able.

    ``lr(step)`` is a pure function of the 1-based optimizer step; nothing else holds state.
    """

    baseline_batch: int
    """B0."""
    target_batch: int
    """B."""
    dataset_size: int
    """n, samples per epoch."""
    dataset_size_source: str
    """Where n came from: ``baseline.dataset_size``, a recipe, or the training data."""
    baseline_lr: float
    """η0."""
    baseline_warmup_epochs: float
    """w0."""
    baseline_iterations: int
    """I0 (given, or ceil(E·n/B0) from the baseline's epochs)."""
    baseline_epochs: float | None
    """E as the spec gave it, or None when the spec gave I0."""
    rule: Literal["date", "paper"]
    """date: the rules per optimizer family (docs/algorithm.md §6); paper: as printed in SC'19."""
    scaling: Literal["sqrt", "linear", "none", "power"]
    """How η grows with k: √k, k, not at all, or k^p with p the optimizer family's exponent."""
    lr_exponent: float
    """p in η = k^p·η0 (0.5 for sqrt, 1 for linear, 0 for none)."""
    lr_note: str
    """Where a probe decides p (the adaptive family under the default rule): which p was taken,
    why, and what would change it, in one line; else empty."""
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
    """E_tot: the baseline's epochs I0·B0/n (budget same-epochs), or f times them (hold)."""
    lr_floor: float
    """η̂."""
    max_legw_batch: int | None
    """Largest batch for which LEGW's warmup still ends before training does (None: no limit)."""
    optimizer: OptimizerSettings
    """The optimizer the run builds."""
    derivations: tuple[Derivation, ...] = field(default=())
    """Every derived number, in the order computed, with its formula and inputs."""
    budget: Literal["same-epochs", "hold", "ramp"] = "same-epochs"
    """same-epochs: the baseline's epochs; hold: the forecast's; ramp: a batch that grows with the
    noise scale (:attr:`ramp`; docs/noise.md)."""
    noise_curve: NoiseCurve | None = None
    """B_noise(e) measured by the probe the plan was given (``date.probe``), else None."""
    forecast: Forecast | None = None
    """What holding the baseline's loss costs at the target batch, from ``noise_curve``."""
    ramp: tuple[BatchStage, ...] = ()
    """budget ramp: the batch's stages, smallest first (docs/noise.md); empty otherwise."""
    ramp_mode: Literal["measured", "planned"] = "measured"
    """budget ramp: measured — the run moves up a rung once its own noise scale passes it (the
    planned start is the latest); planned — the rungs start where the probe's curve puts them."""
    ramp_reach: float = 1.0
    """budget ramp: ρ, a rung B_j is reached once the noise scale is B_j / ρ."""
    rules_version: int = 1
    """The version of the rules that derived this plan (:data:`RULES_VERSION`; 1 for plans written
    before versions were recorded): a run resumed from a checkpoint of older rules keeps its
    plan."""
    schedule: Schedule = field(default_factory=Schedule)
    """The baseline's shape after warmup, kept (date_engine/shapes.py); DATE's linear decay to the
    floor by default."""
    measured: Measurement | None = None
    """What the probe's branches measured (``date probe --batch``): the critical batch over
    samples, and at their target batch the LR exponent and second moment this plan takes where
    it is that batch (docs/branches.md); None without."""
    grad_clip: float | None = None
    """The baseline's gradient clipping (``train.grad_clip``), the global norm every optimizer
    step is clipped to, kept at every batch; None: no clipping. ``date scale``, ``--emit`` and the
    adapters all read it here."""
    tokens_per_sample: int | None = None
    """A language model's sequence length (``baseline.tokens_per_sample``): the plan's samples
    also counted in tokens (:meth:`tokens`); None: samples only."""

    def tokens(self, samples: float) -> float | None:
        """``samples`` in tokens; None where the plan does not know its sequence length."""
        return None if self.tokens_per_sample is None else samples * self.tokens_per_sample

    @property
    def critical_curve(self) -> CriticalCurve | None:
        """The critical batch over the baseline's epochs the probe's branches measured, which the
        forecast, ``hold`` and ``ramp`` read in place of the noise curve; None without branches."""
        return CriticalCurve.measured(self.measured, self.dataset_size, self.noise_curve)

    @property
    def ramp_changes(self) -> tuple[Change, ...]:
        """The moves up the ladder the run measured (``date.ramp: measured``), in order."""
        return tuple(Change(st.first_step, st.batch, st.noise_at_start)
                     for st in self.ramp if st.measured)

    # ---------------------------------------------------------------- the schedule

    def lr(self, step: int) -> float:
        """Learning rate for optimizer step ``step`` (1-based): the schedule ``step`` into
        training (less the index's offset), in optimizer steps — or in epochs under a batch ramp,
        at the stage's own peak, so that every stage keeps its peak and warmup and decay run over
        samples. Steps past the end stay at the floor."""
        if step < 1:
            raise ValueError(f"optimizer steps are counted from 1, got {step}")
        x = step - self.schedule.offset
        epoch = self.epoch(x)
        if self.ramp:
            peak, at, warm, last = (self.stage_at(step).peak_lr, epoch, self.warmup_epochs,
                                    self.total_epochs)
        else:
            peak, at, warm, last = (self.peak_lr, x, self.warmup_iterations,
                                    self.total_iterations)
        return self.schedule.lr(peak, at, warm, last, epoch / self._stretch(),
                                self.warmup_shape == "quadratic", self.lr_floor)

    def lrs(self) -> list[float]:
        """``lr(i)`` for every step ``i = 1..I``."""
        return [self.lr(i) for i in range(1, self.total_iterations + 1)]

    def epoch(self, step: float) -> float:
        """Epochs completed after ``step`` optimizer steps: e = i·B/n (with a ramp, the samples
        of the steps so far over n)."""
        if self.ramp:
            return self.samples_through(step) / self.dataset_size
        return step * self.target_batch / self.dataset_size

    def stage_at(self, step: int) -> BatchStage | None:
        """The ramp's stage optimizer step ``step`` belongs to (the last one past the end); None
        without a ramp."""
        if not self.ramp:
            return None
        return next((s for s in self.ramp if step <= s.last_step), self.ramp[-1])

    def batch_at(self, step: int) -> int:
        """The global batch of optimizer step ``step``."""
        stage = self.stage_at(step)
        return self.target_batch if stage is None else stage.batch

    def samples_through(self, step: float) -> float:
        """Samples trained on by the end of optimizer step ``step`` (0 before the first)."""
        stage = self.stage_at(max(math.ceil(step), 1))
        if stage is None:
            return step * self.target_batch
        return stage.samples_before + (step - stage.first_step + 1) * stage.batch

    def steps_within(self, samples: float) -> int:
        """The most optimizer steps of this plan that train on no more than ``samples``: where a
        run stopped after ``samples`` continues under this plan."""
        low, high = 0, self.total_iterations
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if self.samples_through(mid) <= samples else (low, mid - 1)
        return low

    def _stretch(self) -> float:
        """The plan's epochs over the baseline's: where epoch milestones move (hold, ramp)."""
        return self.total_epochs / (self.baseline_iterations * self.baseline_batch
                                    / self.dataset_size)

    @property
    def phases(self) -> tuple[Phase, ...]:
        """The warmup, decay and floor stretches (empty ones left out); with the baseline's own
        shape, the warmup and the shape after it ("decay")."""
        last = self.total_iterations
        first_decay = max(1, math.ceil(self.warmup_iterations))
        if not self.schedule.is_date_default:
            first_decay = max(1, math.ceil(self.warmup_iterations + self.schedule.offset))
            if self.ramp:
                first_decay = next((i for i in range(1, last + 1) if self.epoch(
                    i - self.schedule.offset) >= self.warmup_epochs), last + 1)
            first_floor = last + 1
        else:
            first_floor = self._first_floor(first_decay)
        spans = (
            ("warmup", 1, first_decay - 1),
            ("decay", first_decay, first_floor - 1),
            ("floor", first_floor, last),
        )
        return tuple(
            Phase(name, a, b, self.epoch(a - 1), self.epoch(b), self.lr(a), self.lr(b))
            for name, a, b in spans
            if a <= b
        )

    def _first_floor(self, first_decay: int) -> int:
        """The first step whose decayed LR is at or below the floor (last + 1 if none)."""
        last = first_floor = self.total_iterations
        if not self.ramp:  # start at the closed form, which can be off by one in floating point
            first_floor = max(first_decay, math.ceil(
                last - self.lr_floor * (last - self.warmup_iterations) / self.peak_lr))
        while self.lr(first_floor) > self.lr_floor:
            first_floor += 1
        while first_floor > first_decay and self.lr(first_floor - 1) <= self.lr_floor:
            first_floor -= 1
        return first_floor

    # ---------------------------------------------------------------- the inputs, shown

    def inputs(self) -> tuple[Derivation, ...]:
        """The baseline values the plan was derived from, with the spec field each came from."""
        length = (("E", "baseline_epochs", "baseline.epochs", "baseline epochs")
                  if self.baseline_epochs is not None else
                  ("I0", "baseline_iterations", "baseline.iterations", "baseline optimizer steps"))
        rows = (("B0", "baseline_batch", "baseline.batch_size", "baseline batch size"),
                ("η0", "baseline_lr", "baseline.lr", "baseline peak learning rate"),
                ("w0", "baseline_warmup_epochs", "baseline.warmup_epochs",
                 "baseline warmup, epochs"),
                length,
                ("n", "dataset_size", self.dataset_size_source, "training samples per epoch"),
                ("η̂", "lr_floor", "date.lr_floor" if self.schedule.is_date_default or
                 self.lr_floor else "baseline.schedule (its own end)", "LR floor"),
                ("B", "target_batch", "--batch", "target batch size"))
        return tuple(Derivation(symbol, name, getattr(self, name), source, "", why)
                     for symbol, name, source, why in rows)

    # ---------------------------------------------------------------- as JSON

    @property
    def identity(self) -> str:
        """A short id of everything the plan derived (:meth:`to_dict`): two plans train alike
        exactly when their ids agree. Schedulers' checkpoints carry it, so that a run is resumed
        under the plan it was trained with (the batch's split over devices is not part of it)."""
        return document_id(self.to_dict())

    def summary(self) -> dict[str, Any]:
        """The plan in the numbers a person tells plans apart by: its id, batch, steps, peak LR."""
        return {"id": self.identity, "batch": self.target_batch,
                "steps": self.total_iterations, "peak_lr": self.peak_lr}

    def to_dict(self) -> dict[str, Any]:
        """The plan's fields plus its phases, as JSON values (lists, not tuples): equal to its own
        JSON round trip."""
        values = {**asdict(self), "phases": [asdict(p) for p in self.phases]}
        if not self.optimizer.decay_exempt:  # the plans of earlier versions read as before
            del values["optimizer"]["decay_exempt"]
        if self.schedule.is_date_default:
            del values["schedule"]
        if self.grad_clip is None:
            del values["grad_clip"]
        if self.tokens_per_sample is None:  # the plans of earlier versions read as before
            del values["tokens_per_sample"]
        if self.measured is None:  # the plans of earlier versions read as before
            del values["measured"]
        return _json_values(values)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """The plan :meth:`to_dict` wrote (keys that are not fields, like ``phases``, ignored)."""
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values.setdefault("lr_note", "")  # plans of rules version 1 carry none
        values["optimizer"] = OptimizerSettings(**values["optimizer"])
        values["derivations"] = tuple(Derivation(**d) for d in values.get("derivations", ()))
        if values.get("noise_curve") is not None:
            values["noise_curve"] = NoiseCurve(**values["noise_curve"])
        if values.get("forecast") is not None:
            ahead = dict(values["forecast"])
            if "critical_batch" in ahead:  # a plan written before B_hold: McCandlish's f = 2 batch
                ahead["holding_batch"] = ahead.pop("critical_batch")
            values["forecast"] = Forecast(**ahead)
        values["ramp"] = tuple(BatchStage(**stage) for stage in values.get("ramp", ()))
        if values.get("measured") is not None:
            values["measured"] = Measurement.from_dict(values["measured"])
        if values.get("schedule") is not None:
            values["schedule"] = Schedule.from_dict(values["schedule"])
        else:
            values.pop("schedule", None)
        return cls(**values)


def document_id(document: dict[str, Any]) -> str:
    """A short id of a plan's JSON document (a Plan's, or a run's with its split): documents
    that are equal share it."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:12]


def _json_values(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_values(v) for v in value]
    return value


def fmt(value: float) -> str:
    """A number as a person writes it: integers plain, others to 8 significant digits."""
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{value:.8g}"


# ------------------------------------------------------------------------------ derivation


class _Ledger:
    """Records each derived number, with its formula and inputs, as the line computing it runs."""

    def __init__(self) -> None:
        self.rows: list[Derivation] = []

    def __call__(
        self, symbol: str, name: str, value: Any, formula: str, inputs: str, note: str = ""
    ) -> Any:
        self.rows.append(Derivation(symbol, name, value, formula, inputs, note))
        return value


RULES_VERSION = 3
"""Raised whenever a default rule changes what a spec derives (2: the adaptive family takes √k
unless a probe's LR check finds room for k^0.75; 3: the LR stops growing at the noise scale of a
probe whose LR check finds the baseline steps-limited)."""

_NAMED_EXPONENTS = {"sqrt": 0.5, "linear": 1.0, "none": 0.0}
_NAMED_REASONS = {"sqrt": "sqrt scaling (the paper)", "linear": "linear scaling (Goyal et al.)",
                  "none": "no scaling"}


def _peak_lr(d: _Ledger, spec: Spec, k: float, curve: NoiseCurve | None,
             taken: TargetSettings | None = None) -> tuple[str, float, float, str]:
    """η: the spec's ``date.scaling`` if it names one, else the rule's — √k for the paper's, k^p
    with the optimizer family's p for the default rule (its probed p where the probe's ``curve``
    carries an LR check that found room), or the exponent the probe's branches measured best at
    this batch (``taken``). Returns (scaling, p, η, the one line that says which exponent was
    taken, why, and what would change it)."""
    eta0, date = spec.baseline.lr, spec.date
    scaling = date.scaling or ("sqrt" if date.rule == "paper" else "power")
    if taken is not None:
        p = taken.lr_exponent
        peak = d("η", "peak_lr", k**p * eta0, f"k^{p:g} · η0", f"{fmt(k)}^{p:g} · {eta0:.5g}",
                 "measured: branches at this batch")
        return scaling, p, peak, _measured_note(taken)
    if scaling == "power":
        rule = entry(spec.baseline.optimizer.name).batch_rule
        p, reason = rule.lr_exponent, rule.lr_reason
        note = ""
        if rule.probed_exponent is not None:
            p, reason, note = _probed(rule, curve)
        why = reason
        b0 = spec.baseline.batch_size
        capped = _capped(date.lr_cap, curve, rule.probed_exponent is not None, date.budget)
        if capped and k * b0 > (cap := curve(curve.last)):
            kc = max(cap / b0, 1.0)
            peak = d("η", "peak_lr", kc**p * eta0, f"(max(B_cap, B0) / B0)^{p:g} · η0",
                     f"({max(cap, b0):.5g} / {b0})^{p:g} · {eta0:.5g}",
                     f"stops at your probe's noise scale (date.lr_cap: {date.lr_cap})")
            note += (f" The LR stops growing at the probe's noise scale, batch {cap:,.0f} "
                     "(date.lr_cap).")
            return scaling, p, peak, note.strip()
        peak = d("η", "peak_lr", k**p * eta0, f"k^{p:g} · η0", f"{fmt(k)}^{p:g} · {eta0:.5g}",
                 why)
        return scaling, p, peak, note
    p = _NAMED_EXPONENTS[scaling]
    formula, inputs = {"sqrt": ("√k · η0", f"√{fmt(k)} · {eta0:.5g}"),
                       "linear": ("k · η0", f"{fmt(k)} · {eta0:.5g}"),
                       "none": ("η0", f"{eta0:.5g}")}[scaling]
    value = {"sqrt": math.sqrt(k) * eta0, "linear": k * eta0, "none": eta0}[scaling]
    return scaling, p, d("η", "peak_lr", value, formula, inputs, _NAMED_REASONS[scaling]), ""


def _capped(lr_cap: str, curve: NoiseCurve | None, adaptive: bool, budget: str) -> bool:
    """Whether the LR stops at the probe's noise scale: with ``noise`` wherever there is a
    probe; with ``auto`` where it was measured and won, the adaptive family in the baseline's
    epochs with a probe whose LR check found the baseline steps-limited (in a ramp, whose batch
    follows the run's own noise scale, it lost: docs/results.md)."""
    if curve is None or lr_cap == "none":
        return False
    return lr_cap == "noise" or (adaptive and budget == "same-epochs" and curve.lr_checked
                                 and curve.steps_limited)


def _probed(rule: BatchRule, curve: NoiseCurve | None) -> tuple[float, str, str]:
    """(p, why, the plan's one line) of a family whose exponent a probe's LR check decides: its
    probed p where the check found room, else its own (√k for the adaptive family)."""
    p, q = rule.lr_exponent, rule.probed_exponent
    if curve is not None and curve.lr_checked and not curve.steps_limited:
        return q, rule.probed_reason, (f"LR exponent {q:g}: the probe's LR check found room "
                                       "(twice the baseline's LR trained it faster).")
    if curve is not None and curve.lr_checked:
        return p, "√k: your probe found no room above it (algorithm.md §6)", (
            f"LR exponent {p:g}: the probe's LR check found the baseline steps-limited (twice "
            "its LR trains it no faster).")
    why = "this probe ran without its LR check" if curve is not None else "no probe"
    return p, rule.lr_reason, (f"LR exponent {p:g} ({why}); a probe whose LR check passes "
                               f"raises it to {q:g}: date probe SPEC.")


def _measured_note(taken: TargetSettings) -> str:
    """The plan's one line on the settings it took from the probe's branches."""
    moment = {"scaled": "the second moment as the rule scales it",
              "fixed": "the baseline's second moment"}[taken.second_moment]
    if not taken.stable:
        return (f"LR exponent {taken.lr_exponent:g} and {moment}, measured: no setting of the "
                f"{taken.tried} branched at batch {taken.batch:,} was stable at its peak LR; "
                "these reached the lowest loss (a smaller batch may hold: see the critical "
                "batch).")
    return (f"LR exponent {taken.lr_exponent:g} and {moment}, measured: the stable setting with "
            f"the lowest loss of the {taken.tried} the probe branched at batch {taken.batch:,} "
            f"(at its peak LR, from sample {taken.at_samples:,}).")


def _optimizer(d: _Ledger, spec: Spec, k: float, p: float,
               second_moment: str | None = None) -> OptimizerSettings:
    """The optimizer that runs: the baseline's options, and under the default rule the
    second-moment decay, ε and decoupled weight decay scaled with k (docs/algorithm.md §6);
    ``second_moment``: the branches' measured choice, in place of ``date.second_moment``."""
    opt, ratio = spec.baseline.optimizer, spec.date.layer_ratio
    options = opt.options()
    rule = entry(opt.name).batch_rule
    if spec.date.rule == "date" and rule is not None and k != 1:
        if second_moment == "fixed" and rule.second_moment is not None:  # measured: shown
            key = "alpha" if rule.second_moment == "alpha" else "betas"
            kept = options[key] if key == "alpha" else options[key][1]
            d("α" if key == "alpha" else "β2", "optimizer." + ("alpha" if key == "alpha" else
                                                             "betas[1]"),
              kept, "the baseline's", f"{kept:g}", "measured: branches at this batch")
        elif (second_moment or spec.date.second_moment) == "fixed":
            pass
        elif rule.second_moment == "alpha":
            options["alpha"] = d("α", "optimizer.alpha", options["alpha"] ** k, "α^k",
                                 f"{options['alpha']:g}^{fmt(k)}", _HALF_LIFE)
        elif rule.second_moment == "betas":
            beta1, beta2 = options["betas"]
            options["betas"] = (beta1, d("β2", "optimizer.betas[1]", beta2**k, "β2^k",
                                         f"{beta2:g}^{fmt(k)}", _HALF_LIFE))
        if rule.scale_eps:
            options["eps"] = d("ε", "optimizer.eps", options["eps"] / math.sqrt(k), "ε / √k",
                               f"{options['eps']:g} / √{fmt(k)}",
                               "the update keeps its scale (algorithm.md §6)")
        if rule.decoupled_decay and options["weight_decay"] and \
                spec.date.weight_decay == "scaled":
            lam = options["weight_decay"]
            options["weight_decay"] = d(
                "λ", "optimizer.weight_decay", lam * k ** (1 - p), f"λ · k^{1 - p:g}",
                f"{lam:g} · {fmt(k)}^{1 - p:g}",
                "λ's timescale in epochs kept (algorithm.md §6)")
    return OptimizerSettings(opt.name, options, {"mode": ratio.mode, **ratio.options()},
                             decay_exempt=opt.decay_biases_and_norms is False)


_HALF_LIFE = "g² average spans the same samples (algorithm.md §6)"


def require_spec(spec: Any, caller: str) -> None:
    expect(spec, Spec, f"{caller}: spec", "a validated Spec (load_spec(path), "
           "parse_spec(mapping) or baseline(...))")


def derive_plan(spec: Spec, batch: int, dataset_size: int | None = None,
                dataset_size_source: str = "the training data", multiple_of: int = 1,
                noise_curve: NoiseCurve | None = None,
                ramp_changes: tuple[Change, ...] = (),
                measured: Measurement | None = None) -> Plan:
    """Derive the plan for training ``spec``'s baseline at global batch ``batch``.

    ``dataset_size`` is n when the spec does not give ``baseline.dataset_size`` (from a recipe or
    the data, named by ``dataset_size_source``). ``noise_curve`` is the baseline's measured
    B_noise(e) (a probe's): with it the plan forecasts the epochs the batch needs, and
    ``date.budget: hold`` trains them. ``measured``: what a probe's branches measured; at their
    target batch, under the default rule and no ``date.scaling``, the plan takes the LR exponent
    and second moment they found best. ``ramp_changes`` are the moves up a measured ramp made
    (:func:`date_engine.ramp.follow`); the plan of a run that made them (ValueError if no run
    could have). Raises :class:`PlanError` when no sound plan exists
    (docs/algorithm.md §2); a batch it suggests instead is a multiple of ``multiple_of`` (the
    processes the batch is shared by), so that it is accepted.
    """
    require_spec(spec, "derive_plan")
    base, date = spec.baseline, spec.date
    batch = positive_int(named("batch", "--batch"), batch)
    n, source = samples_per_epoch(spec, dataset_size, dataset_size_source)
    if batch > n:
        raise PlanError(f"batch {batch} is larger than the data set ({n} samples, {source}); "
                        f"choose {named('batch', '--batch', largest_batch(spec, n, multiple_of))}"
                        " or less.")
    b0, eta0, w0 = base.batch_size, base.lr, base.warmup_epochs
    d = _Ledger()
    i0 = _baseline_steps(spec, n)
    if base.iterations is None:  # derived from the epochs: shown
        d("I0", "baseline_iterations", i0, "⌈E · n / B0⌉",
          f"⌈{fmt(base.epochs)} · {fmt(n)} / {fmt(b0)}⌉", "baseline optimizer steps")
    if i0 > MAX_STEPS:
        raise PlanError(f"the baseline would take {i0:,} optimizer steps (⌈E · n / B0⌉), more than "
                        f"{MAX_STEPS:,}; check baseline.epochs, dataset_size and batch_size.")
    k = d("k", "scale", batch / b0, "B / B0", f"{fmt(batch)} / {fmt(b0)}")
    taken = measured.settings if measured is not None and measured.settings is not None and \
        measured.settings.batch == batch and date.rule == "date" and date.scaling is None and \
        batch != b0 else None
    scaling, p, peak, lr_note = _peak_lr(d, spec, k, noise_curve, taken)
    warmup = date.warmup or "legw"
    total_epochs = i0 * b0 / n
    cost = CriticalCurve.measured(measured, n, noise_curve) or noise_curve
    stages, ramp_samples = (
        _ramp(d, spec, noise_curve, cost, batch, n, multiple_of, total_epochs, ramp_changes,
              taken)
        if date.budget == "ramp" else ((), 0))
    if ramp_changes and not (stages and date.ramp == "measured"):
        raise ValueError("moves up a batch ramp apply only to date.budget ramp, date.ramp measured")
    warmup_epochs, warmup_iterations = _warmup(d, warmup, stages, k, w0, n, b0, batch)
    ahead = _forecast(d, spec, cost, batch, b0, total_epochs, n)
    if stages:
        total_epochs, total_iterations = _ramp_budget(d, stages, ramp_samples, n, total_epochs,
                                                      i0, cost.symbol)
    elif date.budget == "hold":
        total_epochs, total_iterations = _hold_budget(d, ahead, total_epochs, n, batch, i0)
    else:
        total_epochs, total_iterations = _same_epochs_budget(d, total_epochs, n, b0, batch, i0)
    max_batch = None
    if warmup == "legw" and w0 > 0:
        max_batch = d("B_max", "max_legw_batch", _below(b0 * total_epochs / w0),
                      "largest B < B0 · E_tot / w0", f"{fmt(b0)} · {fmt(total_epochs)} / {fmt(w0)}",
                      "beyond it LEGW's warmup outlasts training")
    schedule = base.schedule.shape(eta0)
    floor = date.lr_floor if schedule.is_date_default or date.lr_floor != LR_FLOOR else 0.0
    _refuse_unsound(spec, batch, k, warmup_epochs, total_epochs,
                    largest_batch(spec, n, multiple_of), peak, floor)
    optimizer = _optimizer(d, spec, k, p, taken.second_moment
                           if taken and date.second_moment is None else None)
    if stages and stages[-1].batch != batch:  # the ramp ends below the target: it runs its last
        optimizer = OptimizerSettings(optimizer.name, dict(stages[-1].options),
                                      optimizer.layer_ratio, optimizer.decay_exempt)
    return Plan(
        baseline_batch=b0, target_batch=batch, dataset_size=n, dataset_size_source=source,
        baseline_lr=eta0, baseline_warmup_epochs=w0, baseline_iterations=i0,
        baseline_epochs=base.epochs, rule=date.rule, scaling=scaling, lr_exponent=p,
        lr_note=lr_note,
        warmup=warmup, warmup_shape=date.warmup_shape, scale=k, peak_lr=peak,
        warmup_epochs=warmup_epochs, warmup_iterations=warmup_iterations,
        total_iterations=total_iterations, total_epochs=total_epochs, lr_floor=floor,
        max_legw_batch=max_batch, optimizer=optimizer, derivations=tuple(d.rows),
        budget=date.budget, noise_curve=noise_curve, forecast=ahead, ramp=stages,
        ramp_mode=date.ramp, ramp_reach=date.ramp_reach, rules_version=RULES_VERSION,
        schedule=schedule, grad_clip=spec.train.grad_clip, measured=measured,
        tokens_per_sample=base.tokens_per_sample,
    )


def _below(x: float) -> int:
    """The largest whole number below ``x``, ``x`` read as the whole number it is within float
    rounding of (a warmup written to 15 digits puts B0·E/w0 a hair off the integer it is)."""
    whole = round(x)
    return whole - 1 if abs(x - whole) <= 1e-9 * abs(x) else math.ceil(x) - 1


def _warmup(d: _Ledger, warmup: str, stages: tuple[BatchStage, ...], k: float, w0: float, n: int,
            b0: int, batch: int) -> tuple[float, float]:
    """The warmup's epochs and optimizer steps: LEGW's k·w0 (at a ramp's first batch), or w0."""
    if warmup == "legw" and stages:  # LEGW at the batch the ramp starts with
        k0 = stages[0].scale
        warmup_epochs = d("w", "warmup_epochs", k0 * w0, "k₀ · w0", f"{fmt(k0)} · {fmt(w0)}",
                          "linear-epoch warmup (LEGW) at the ramp's first batch")
    elif warmup == "legw":
        warmup_epochs = d("w", "warmup_epochs", k * w0, "k · w0", f"{fmt(k)} · {fmt(w0)}",
                          "linear-epoch warmup (LEGW)")
    else:
        warmup_epochs = d("w", "warmup_epochs", w0, "w0", fmt(w0), "constant-epoch warmup")
    if stages:
        return warmup_epochs, d("I_w", "warmup_iterations", _ramp_step(stages, warmup_epochs * n),
                                "the step whose samples reach w · n",
                                f"{fmt(warmup_epochs)} · {fmt(n)} samples")
    if warmup == "legw":  # = w·n/B, written so that it is bit-identical at every B
        return warmup_epochs, d("I_w", "warmup_iterations", w0 * n / b0, "w0 · n / B0",
                                f"{fmt(w0)} · {fmt(n)} / {fmt(b0)}",
                                "= w·n/B: constant across batches")
    return warmup_epochs, d("I_w", "warmup_iterations", w0 * n / batch, "w · n / B",
                            f"{fmt(w0)} · {fmt(n)} / {fmt(batch)}")


# The three budgets: each returns the run's (epochs, optimizer steps) and records how.


def _same_epochs_budget(d: _Ledger, e0: float, n: int, b0: int, batch: int, i0: int
                        ) -> tuple[float, int]:
    """same-epochs: the baseline's E0 epochs, k× fewer steps."""
    steps = d("I", "total_iterations", -(-b0 * i0 // batch), "⌈B0 · I0 / B⌉",
              f"⌈{fmt(b0)} · {fmt(i0)} / {fmt(batch)}⌉ = ⌈{fmt(b0 * i0 / batch)}⌉",
              "same epochs, k× fewer steps")
    d("E_tot", "total_epochs", e0, "I0 · B0 / n", f"{fmt(i0)} · {fmt(b0)} / {fmt(n)}",
      "unchanged by scaling")
    return e0, steps


def _hold_budget(d: _Ledger, ahead: Forecast | None, e0: float, n: int, batch: int, i0: int
                 ) -> tuple[float, int]:
    """hold: the epochs the probe's forecast says the batch needs for the baseline's loss."""
    factor = max(ahead.factor, 1.0)
    epochs = d("E_tot", "total_epochs", factor * e0, "max(f, 1) · E0", f"{factor:.6g} · {fmt(e0)}",
               "budget hold: the epochs forecast to reach the baseline's loss")
    steps = math.ceil(epochs * n / batch)
    d("I", "total_iterations", steps, "⌈E_tot · n / B⌉",
      f"⌈{epochs:.6g} · {fmt(n)} / {fmt(batch)}⌉",
      f"{i0 / steps:.3g}× fewer steps than the baseline's {fmt(i0)}")
    return epochs, steps


def _ramp_budget(d: _Ledger, stages: tuple[BatchStage, ...], samples: int, n: int, e0: float,
                 i0: int, what: str = "B_noise") -> tuple[float, int]:
    """ramp: the samples the forecast puts on the ramp's rungs, and their steps; ``what`` the
    curve's name (B_crit where the probe's branches measured it)."""
    epochs = d("E_tot", "total_epochs", samples / n,
               f"∫₀^E0 ({what}(e) + b(e)) / ({what}(e) + B0) de",
               f"b(e) the ramp's batch, E0 = {fmt(e0)}",
               "the epochs the ramp is forecast to need for the baseline's loss")
    last = stages[-1].last_step
    steps = d("I", "total_iterations", last, "Σ_j I_j", " + ".join(str(st.steps) for st in stages),
              f"{i0 / last:.3g}× fewer steps than the baseline's {fmt(i0)}")
    return epochs, steps


def _ramp(d: _Ledger, spec: Spec, curve: NoiseCurve | None, cost: NoiseCurve | CriticalCurve |
          None, batch: int, n: int, multiple_of: int, e0: float, changes: tuple[Change, ...],
          taken: TargetSettings | None = None) -> tuple[tuple[BatchStage, ...], int]:
    """budget ramp: the stages of :func:`date_engine.ramp.ramp` on ``cost`` (the measured critical
    batch where the probe branched, else the noise curve; with a measured ramp's ``changes``
    applied by :func:`~date_engine.ramp.follow`), each with the LR and optimizer options the rule
    derives at its batch (recorded once, as the ramp's row); and the samples of the planned ramp,
    which the LR's shape spans whatever the run's moves. The stage at the batch the probe's
    branches measured settings at (``taken``) takes them."""
    if curve is None:
        raise PlanError(
            "date.budget is ramp, which grows the batch with the noise scale a probe measured; "
            f"run date probe SPEC and pass {named('probe', '--probe', '<its probe.json>')}, or "
            f"use {named('budget', '--budget', 'same-epochs')}.")
    b0, measured = spec.baseline.batch_size, spec.date.ramp == "measured"
    reach = spec.date.ramp_reach
    rungs = ramp(cost, batch, b0, e0, n, multiple_of, reach)
    samples = rungs[-1].samples_after
    if measured:
        rungs = follow(rungs, changes, samples)
    stages = []
    for rung in rungs:
        scratch = _Ledger()  # the stage's values are shown in the ramp's table
        k = rung.batch / b0
        here = taken if taken is not None and taken.batch == rung.batch else None
        _, p, peak, _ = _peak_lr(scratch, spec, k, curve, here)
        options = _optimizer(scratch, spec, k, p, here.second_moment
                             if here and spec.date.second_moment is None else None).options
        stages.append(BatchStage(**asdict(rung), scale=k, peak_lr=peak, options=options))
    moved = f"; {len(changes)} move(s) measured in the run" if changes else ""
    if isinstance(cost, CriticalCurve):
        d("B_j", "ramp", [st.batch for st in stages],
          "B / 2^j, from the step where B_crit ≥ B_j / ρ",
          f"B_crit {_critical_points(cost)}, ρ = {fmt(reach)}{moved}",
          "measured: the critical batch the probe's branches read, the noise curve's growth "
          "before and after them (extrapolated)"
          + ("; a run moves up earlier only where its own noise scale passes a rung past the "
             "last branched checkpoint" if measured else ""))
        return tuple(stages), samples
    d("B_j", "ramp", [st.batch for st in stages], "B / 2^j, from the step where B_noise ≥ B_j / ρ",
      f"B_noise(e) = {curve.a:.4g} · e^{curve.beta:.3g}, ρ = {fmt(reach)}{moved}",
      "the batch grows as the measured noise scale does (docs/noise.md)"
      + ("; measured: up a rung once the run's own noise scale, once measurable and risen from "
         "its lowest, passes B_j / ρ; at the latest here"
         if measured else ""))
    return tuple(stages), samples


def _ramp_step(stages: tuple[BatchStage, ...], samples: float) -> float:
    """The (fractional) optimizer step at which a ramp has trained on ``samples`` samples."""
    for st in stages:
        if samples <= st.samples_after:
            return st.first_step - 1 + (samples - st.samples_before) / st.batch
    return float(stages[-1].last_step)


def _forecast(d: _Ledger, spec: Spec, curve: NoiseCurve | CriticalCurve | None, batch: int,
              b0: int, e0: float, n: int) -> Forecast | None:
    """The probe's forecast for ``batch`` (docs/noise.md), recorded: from the critical batch its
    branches measured where it has them, else from its noise curve; None without a probe, which
    budget hold refuses."""
    if curve is None:
        if spec.date.budget == "hold":
            raise PlanError(
                "date.budget is hold, which takes its epochs from a probe's forecast; run date "
                f"probe SPEC and pass {named('probe', '--probe', '<its probe.json>')}, or use "
                f"{named('budget', '--budget', 'same-epochs')}.")
        return None
    ahead = forecast(curve, batch, b0, e0, n)
    if isinstance(curve, CriticalCurve):
        return _measured_forecast(d, curve, ahead, batch, b0, e0)
    d("B_noise", "forecast.noise_at_end", ahead.noise_at_end, "a · E0^β",
      f"{curve.a:.4g} · {fmt(e0)}^{curve.beta:.3g}",
      f"the probe's noise scale at the baseline's end (measured to epoch {curve.last:.3g})")
    if curve.steps_limited:
        d("f", "forecast.factor", ahead.factor, "B / B0", f"{fmt(batch)} / {fmt(b0)}",
          "steps-limited: twice the LR did not lower the probe's loss (its LR check), so B_noise "
          "is taken as 0 and every batch needs the baseline's steps")
        d("B_hold", "forecast.holding_batch", ahead.holding_batch, "B where f = 4/3",
          f"⌊4/3 · {fmt(b0)}⌋", "beyond it same-epoch training is expected to lose accuracy")
        return ahead
    d("f", "forecast.factor", ahead.factor, "∫₀^E0 (B_noise(e) + B) / (B_noise(e) + B0) de / E0",
      f"B = {fmt(batch)}, B0 = {fmt(b0)}, E0 = {fmt(e0)}",
      "epochs to the baseline's loss over its epochs (McCandlish et al. 2018)")
    d("B_hold", "forecast.holding_batch", ahead.holding_batch, "B where f = 4/3",
      f"B_noise(e) = {curve.a:.4g} · e^{curve.beta:.3g}",
      "beyond it same-epoch training is expected to lose accuracy")
    if ahead.holding_low is not None:
        d("s", "forecast.log_error", curve.log_error(e0), "s_fit · √(1/n + (ln E0 − x̄)²/Sxx)",
          f"s_fit = {curve.spread:.3g}, n = {curve.points}, ln E0 = {math.log(e0):.3g}, "
          f"x̄ = {curve.center:.3g}, Sxx = {curve.sxx:.3g}",
          "standard error of ln B_noise(E0): the probe's scatter about its line, growing with "
          "the extrapolation")
        d("B_hold−", "forecast.holding_low", ahead.holding_low, "B_hold on B_noise(e)·e^−s(e)",
          "one standard error below the fit", "the probe's own uncertainty, not the model's")
        d("B_hold+", "forecast.holding_high", ahead.holding_high, "B_hold on B_noise(e)·e^+s(e)",
          "one standard error above the fit", "the probe's own uncertainty, not the model's")
    return ahead


def _measured_forecast(d: _Ledger, curve: CriticalCurve, ahead: Forecast, batch: int, b0: int,
                       e0: float) -> Forecast:
    """The forecast's rows where the probe's branches measured the critical batch."""
    d("B_crit", "forecast.noise_at_end", ahead.noise_at_end, "B_crit(E0)", _critical_points(curve),
      f"measured at epochs {curve.first:.3g}–{curve.last:.3g}; to E0 = {fmt(e0)} the noise "
      "curve's growth (extrapolated)" if curve.last < e0 else "measured: branches")
    d("f", "forecast.factor", ahead.factor, "∫₀^E0 (B_crit(e) + B) / (B_crit(e) + B0) de / E0",
      f"B = {fmt(batch)}, B0 = {fmt(b0)}, E0 = {fmt(e0)}",
      "epochs to the baseline's loss over its epochs, B_crit measured in place of B_noise "
      "(McCandlish et al. 2018)")
    d("B_hold", "forecast.holding_batch", ahead.holding_batch, "B where f = 4/3",
      _critical_points(curve), "beyond it same-epoch training is expected to lose accuracy")
    return ahead


def _critical_points(curve: CriticalCurve) -> str:
    """``96 at epoch 0.0422, 96 at epoch 0.0844``: the measured points, for the ledger."""
    return ", ".join(f"{c:,} at epoch {e:.3g}" for e, c in curve.points)


def largest_batch(spec: Spec, n: int, multiple_of: int = 1) -> int:
    """The largest batch a plan of ``spec`` accepts: no larger than the data set (n) nor than
    LEGW's limit, a multiple of ``multiple_of``."""
    base = spec.baseline
    limit = n
    if (spec.date.warmup or "legw") == "legw" and base.warmup_epochs > 0:
        total_epochs = _baseline_steps(spec, n) * base.batch_size / n
        limit = min(n, math.ceil(base.batch_size * total_epochs / base.warmup_epochs) - 1)
    return max(limit - limit % multiple_of, multiple_of)


def _baseline_steps(spec: Spec, n: int) -> int:
    """I0: the spec's iterations, or ⌈E·n/B0⌉ from its epochs (as the decimal written, so that 0.1
    epochs stays exact)."""
    base = spec.baseline
    if base.iterations is not None:
        return base.iterations
    return math.ceil(Fraction(repr(base.epochs)) * n / base.batch_size)


def samples_per_epoch(spec: Spec, dataset_size: int | None, source: str) -> tuple[int, str]:
    """n and where it came from: the spec's ``baseline.dataset_size``, else ``dataset_size``."""
    if spec.baseline.dataset_size is not None:
        n, source = spec.baseline.dataset_size, "baseline.dataset_size"
    elif dataset_size is not None:
        n = dataset_size
    else:
        raise PlanError(
            "baseline.dataset_size is missing and no recipe supplies it; add "
            "'dataset_size: <training samples>' under baseline."
        )
    return n, source


def _refuse_unsound(
    spec: Spec,
    batch: int,
    k: float,
    warmup_epochs: float,
    total_epochs: float,
    max_batch: int | None,
    peak: float,
    floor: float,
) -> None:
    """The plans of docs/algorithm.md §2 that cannot work, each refused with its fix."""
    if warmup_epochs >= total_epochs:
        raise PlanError(
            _warmup_too_long(
                batch, k, spec.baseline.warmup_epochs, warmup_epochs, total_epochs, max_batch
            )
        )
    if floor >= peak:
        raise PlanError(
            f"date.lr_floor ({fmt(floor)}) is not below the peak LR ({fmt(peak)}) at "
            f"batch {batch}; lower it (the default is 1e-6)."
        )

def _warmup_too_long(batch, k, w0, w, total, max_batch) -> str:
    if w0 >= total:  # the baseline itself never finishes warming up
        return (
            f"baseline.warmup_epochs ({fmt(w0)}) is not shorter than the whole baseline run "
            f"({fmt(total)} epochs), so warmup would never finish; shorten it or train for more "
            "epochs."
        )
    return (
        f"batch {batch}: LEGW's warmup, k·w0 = {fmt(k)} × {fmt(w0)} = {w:.4g} epochs, would "
        f"outlast training's {total:.4g}; LEGW fits up to batch {max_batch} (or "
        f"{named('budget', '--budget', 'hold')} with a probe, or date.warmup: constant)."
    )


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int (numpy integers welcome), or a PlanError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise PlanError(f"{name} must be a positive whole number, got {value!r}.")
    return int(value)
