"""The baseline spec: the YAML a user writes, validated.

A spec describes a small-batch run that already works (``baseline``), how DATE should scale it
(``date``) and how the bundled trainer should run (``train``). Key names are the public file
format; unknown keys are rejected so that a typo never silently falls back to a default.

    recipe: lenet-mnist
    baseline: {batch_size: 1024, lr: 1.25e-3, warmup_epochs: 2, iterations: 1755,
               dataset_size: 60000, optimizer: {name: rmsprop}}
    date: {rule: date, warmup_shape: linear, lr_floor: 1.0e-6}   # rule: paper for the SC'19 rule
    train: {micro_batch: 256}

:func:`load_spec` reads a file, applies ``key=value`` overrides and returns a frozen :class:`Spec`,
or raises :class:`~date_engine.errors.SpecError` with one sentence naming the file, the field and
the fix.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from date_engine.catalog import LAYER_RATIO_DEFAULTS, entry, spec_names
from date_engine.errors import SpecError, expect, named
from date_engine.files import read_small_text
from date_engine.shapes import DecayShape, Schedule, Shape

__all__ = [
    "BaselineSpec",
    "DateSpec",
    "LayerRatioSpec",
    "OptimizerSpec",
    "Spec",
    "TrainSpec",
    "apply_overrides",
    "describe_error",
    "load_spec",
    "parse_spec",
    "spec_with",
]

OptimizerName = Literal[spec_names()]  # type: ignore[valid-type]  # the catalog's names


def _stray_option(section: BaseModel, key: str, allowed: Mapping[str, Any]) -> str | None:
    """The first option ``section`` sets that is neither its chooser ``key`` nor in ``allowed``."""
    stray = sorted(f for f in section.model_fields_set
                   if f != key and f not in allowed and getattr(section, f) is not None)
    return stray[0] if stray else None


def _resolved(section: BaseModel, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Every option in ``defaults``: the section's value where it sets one, else the default."""
    return {k: (v if (v := getattr(section, k)) is not None else d) for k, d in defaults.items()}


def _a_path(text: str) -> str:
    if not text.strip():
        raise ValueError("an empty path; give a file or folder, or leave the key out")
    return text


PathText = Annotated[str, AfterValidator(_a_path)]
"""A path as the user wrote it; empty or blank text is refused (as a path it would be '.', the
folder date runs in)."""


# Bounds that no real run reaches and that keep every derived number finite and every loop short.
MAX_SAMPLES = 10**12
"""Largest batch or data set, in samples."""
MAX_STEPS = 10**9
"""Most optimizer steps a baseline (or a plan) may have."""
MAX_EPOCHS = 10**6
MAX_LR = 1e6
MAX_SEED = 2**32 - 1
"""Seeds as numpy takes them; the processes' own seeds derived from it stay far below 2^63."""

Samples = Annotated[int, Field(gt=0, le=MAX_SAMPLES)]


class _Section(BaseModel):
    # strict: no silent coercions (``batch_size: true`` is not 1; ``lr: "0.1"`` is not 0.1)
    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True,
        strict=True,
    )


class OptimizerSpec(_Section):
    """The base optimizer of the baseline run; DATE keeps it and adapts its per-layer step.

    Options a base optimizer does not have are rejected; options left out take torch's defaults.
    """

    name: OptimizerName = "momentum"
    """sgd | momentum | nesterov | adagrad | rmsprop | adam | adamw, or lars | lamb (which bring
    their own per-layer trust ratio, so they need ``date.layer_ratio.mode: off``)."""
    momentum: float | None = Field(default=None, ge=0.0, lt=1.0)
    """Momentum factor (momentum, nesterov, lars: default 0.9; rmsprop: default 0)."""
    dampening: float | None = Field(default=None, ge=0.0, le=1.0)
    """Momentum dampening (momentum only; default 0)."""
    weight_decay: float | None = Field(default=None, ge=0.0)
    """L2 penalty (decoupled for adamw). Default 0, or 0.01 for adamw, as in torch."""
    betas: tuple[float, float] | None = None
    """Adam's moment decay rates (adam, adamw, lamb; default [0.9, 0.999])."""
    eps: float | None = Field(default=None, gt=0.0)
    """Denominator term of adaptive optimizers (adagrad 1e-10; rmsprop, adam, adamw 1e-8; lamb
    1e-6)."""
    alpha: float | None = Field(default=None, gt=0.0, lt=1.0)
    """RMSprop's squared-gradient decay (default 0.99)."""
    centered: bool | None = None
    """RMSprop: normalise by the gradient's variance instead of its second moment."""
    amsgrad: bool | None = None
    """Adam/AdamW: keep the running maximum of the second moment."""
    lr_decay: float | None = Field(default=None, ge=0.0)
    """AdaGrad's own learning-rate decay (default 0)."""
    initial_accumulator_value: float | None = Field(default=None, ge=0.0)
    """AdaGrad's starting sum of squares (default 0)."""
    phi_bounds: tuple[float, float] | None = None
    """LARS/LAMB: clamp φ(‖w‖) of the trust ratio to [lower, upper] (You et al. 2020); a lower
    bound above 0 lets a layer that starts at zero (a zero-initialised head) grow. Default: φ is
    the identity, as published."""

    decay_biases_and_norms: bool | None = None
    """Whether weight decay applies to biases and norm weights (every tensor of one dimension or
    fewer) too (default true); false: only to the others, as Hugging Face's Trainer, nanoGPT and
    timm do."""

    @field_validator("betas", "phi_bounds", mode="before")
    @classmethod
    def _pair(cls, value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value  # YAML writes a list

    @model_validator(mode="after")
    def _options_belong_to_optimizer(self) -> OptimizerSpec:
        allowed = {**entry(self.name).defaults, "decay_biases_and_norms": True}
        if stray := _stray_option(self, "name", allowed):
            raise ValueError(
                f"'{stray}' is not an option of the {self.name} optimizer; remove it "
                f"(its options: {', '.join(allowed)})"
            )
        if self.betas is not None and not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must lie in [0, 1), got {list(self.betas)}")
        if self.phi_bounds is not None and not 0.0 <= self.phi_bounds[0] < self.phi_bounds[1]:
            raise ValueError(f"phi_bounds must be [lower, upper] with 0 <= lower < upper, got "
                             f"{list(self.phi_bounds)}")
        return self

    @property
    def family(self) -> str:
        """sgd, adaptive or layerwise (see :mod:`date_engine.catalog`)."""
        return entry(self.name).family

    def options(self) -> dict[str, Any]:
        """Every option of this optimizer, the spec's value where given, else torch's default."""
        return _resolved(self, entry(self.name).defaults)


class LayerRatioSpec(_Section):
    """Per-layer learning-rate ratios (paper §3.5; docs/algorithm.md §3)."""

    mode: Literal["dynamic", "static", "off"] = "dynamic"
    """dynamic: clamp(ρ/m, 1/γ, γ) with m the geometric mean of the ratios; static: clamp(c·ρ,
    lower, upper) with fixed bounds (the paper's Algorithm 1 read literally); off: the base
    optimizer unchanged."""
    gamma: float | None = Field(default=None, ge=1.0)
    """dynamic: how far a layer's ratio may stray from the geometric mean (a factor ≥ 1)."""
    trust_coefficient: float | None = Field(default=None, gt=0.0)
    """static: c, the trust coefficient multiplying ||w||/||g||."""
    lower: float | None = Field(default=None, ge=0.0)
    """static: the lowest ratio allowed."""
    upper: float | None = Field(default=None, gt=0.0)
    """static: the highest ratio allowed."""

    @model_validator(mode="after")
    def _options_belong_to_mode(self) -> LayerRatioSpec:
        if stray := _stray_option(self, "mode", LAYER_RATIO_DEFAULTS[self.mode]):
            owner = next(m for m, opts in LAYER_RATIO_DEFAULTS.items() if stray in opts)
            raise ValueError(
                f"'{stray}' belongs to mode {owner}, not {self.mode}; remove it or set "
                f"mode: {owner}"
            )
        options = self.options()
        if self.mode == "static" and options["lower"] > options["upper"]:
            raise ValueError(
                f"lower ({options['lower']:g}) is above upper ({options['upper']:g}); swap them"
            )
        return self

    def options(self) -> dict[str, Any]:
        """This mode's options, the spec's value where given, else the default."""
        return _resolved(self, LAYER_RATIO_DEFAULTS[self.mode])


SCHEDULE_OPTIONS: dict[Shape, tuple[str, ...]] = {
    "linear": ("final_lr", "final_fraction"),
    "cosine": ("final_lr", "final_fraction"),
    "polynomial": ("final_lr", "final_fraction", "power"),
    "constant": (),
    "step": ("every_epochs", "factor"),
    "multistep": ("milestones", "factor"),
    "wsd": ("final_lr", "final_fraction", "decay_fraction", "decay_shape"),
    "inverse_sqrt": (),
}
"""The options each shape of ``baseline.schedule`` takes (besides ``name`` and ``index``)."""


class ScheduleSpec(_Section):
    """The baseline's LR schedule after its warmup (date_engine/shapes.py): DATE keeps its shape
    at every batch, over the same fraction of training."""

    name: Shape = "linear"
    """linear (DATE's: to date.lr_floor unless an end is given) | cosine | polynomial | constant |
    step | multistep | wsd (warmup-stable-decay) | inverse_sqrt."""
    index: Literal["paper", "torch"] | None = None
    """torch: the LR of optimizer step i is the schedule after i − 1 steps, as torch's and
    Hugging Face's schedulers run it; paper: after i steps (DATE's formula). Default: paper for
    linear, torch for every other shape."""
    final_lr: float | None = Field(default=None, ge=0.0)
    """The LR the baseline ends at (linear, cosine, polynomial, wsd); the plan ends at the same
    fraction of its peak."""
    final_fraction: float | None = Field(default=None, ge=0.0, le=1.0)
    """Or the end as a fraction of the peak. Default 0 (linear: date.lr_floor)."""
    power: float | None = Field(default=None, gt=0.0)
    """polynomial: the exponent (default 1)."""
    every_epochs: float | None = Field(default=None, gt=0.0)
    """step: multiply the LR by ``factor`` every so many epochs of the baseline."""
    milestones: tuple[float, ...] | None = None
    """multistep: the baseline's epochs at which the LR is multiplied by ``factor``."""
    factor: float | None = Field(default=None, gt=0.0, le=1.0)
    """step, multistep: the multiplier (default 0.1)."""
    decay_fraction: float | None = Field(default=None, gt=0.0, le=1.0)
    """wsd: the share of training the final decay takes (default 0.1)."""
    decay_shape: DecayShape | None = None
    """wsd: the final decay's shape (default linear)."""

    @field_validator("milestones", mode="before")
    @classmethod
    def _list(cls, value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value  # YAML writes a list

    @model_validator(mode="after")
    def _options_belong_to_shape(self) -> ScheduleSpec:
        allowed = dict.fromkeys(("index", *SCHEDULE_OPTIONS[self.name]))
        if stray := _stray_option(self, "name", allowed):
            takes = ", ".join(SCHEDULE_OPTIONS[self.name]) or "no options"
            raise ValueError(f"'{stray}' is not an option of the {self.name} schedule; remove it "
                             f"({self.name} takes {takes})")
        if self.final_lr is not None and self.final_fraction is not None:
            raise ValueError("give final_lr or final_fraction, not both")
        if self.name == "step" and self.every_epochs is None:
            raise ValueError("the step schedule needs every_epochs (e.g. every_epochs: 30)")
        if self.name == "multistep" and not self.milestones:
            raise ValueError("the multistep schedule needs milestones, in epochs (e.g. "
                             "milestones: [30, 60, 80])")
        if self.milestones and (any(not 0 < m <= MAX_EPOCHS for m in self.milestones)
                                or list(self.milestones) != sorted(self.milestones)):
            raise ValueError(f"milestones must be increasing epochs above 0, got "
                             f"{list(self.milestones)}")
        return self

    def shape(self, baseline_lr: float) -> Schedule:
        """The schedule the plan keeps, its end as a fraction of the peak."""
        index = self.index or ("paper" if self.name == "linear" else "torch")
        final = (self.final_fraction if self.final_fraction is not None else
                 self.final_lr / baseline_lr if self.final_lr is not None else
                 None if self.name == "linear" else 0.0)
        every = (self.every_epochs,) if self.every_epochs is not None else ()
        return Schedule(
            name=self.name, index=index, final=final,
            power=self.power if self.power is not None else 1.0,
            factor=self.factor if self.factor is not None else 0.1,
            milestones=every or tuple(self.milestones or ()),
            decay_fraction=self.decay_fraction if self.decay_fraction is not None else 0.1,
            decay_shape=self.decay_shape or "linear")


class BaselineSpec(_Section):
    """The small-batch run that already works: DATE's only inputs (docs/algorithm.md §1)."""

    batch_size: Samples
    """B0: the baseline's global batch size, in samples."""
    lr: float = Field(gt=0.0, le=MAX_LR)
    """η0: the baseline's peak learning rate."""
    warmup_epochs: float = Field(ge=0.0, le=MAX_EPOCHS)
    """w0: the baseline's warmup length, in epochs (0 for none)."""
    iterations: Annotated[int, Field(gt=0, le=MAX_STEPS)] | None = None
    """I0: the baseline's optimizer steps. Give this or ``epochs``, not both."""
    epochs: float | None = Field(default=None, gt=0.0, le=MAX_EPOCHS)
    """E: the baseline's length in epochs; I0 = ceil(E·n/B0). Give this or ``iterations``."""
    dataset_size: Samples | None = None
    """n: training samples per epoch. Optional when the recipe knows it."""
    tokens_per_sample: int | None = Field(default=None, gt=0, le=1 << 24)
    """A language model's tokens in each sample (its sequence length): the plan then counts its
    batch, warmup, decay and ramp in tokens too (everything is indexed by samples, so a batch
    that changes keeps them at the same tokens). What it counts, not what it trains: left out
    of the fingerprint."""
    optimizer: OptimizerSpec = OptimizerSpec()
    """The base optimizer and its options."""
    schedule: ScheduleSpec = ScheduleSpec()
    """The LR schedule after warmup (default: DATE's linear decay to date.lr_floor)."""

    @field_validator("schedule", mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value  # schedule: cosine

    @model_validator(mode="after")
    def _one_length(self) -> BaselineSpec:
        if (self.iterations is None) == (self.epochs is None):
            given = "both" if self.iterations is not None else "neither"
            raise ValueError(
                "give exactly one of 'iterations' or 'epochs' for the baseline's length "
                f"(got {given}; with --set, clear the other, e.g. --set baseline.iterations=null "
                "--set baseline.epochs=5)"
            )
        final = self.schedule.final_lr
        if final is not None and final > self.lr:
            raise ValueError(
                f"schedule.final_lr {final:g} is above baseline.lr {self.lr:g}: a decay ends at or "
                f"below its peak; give final_lr <= {self.lr:g} (or final_fraction, a share of the "
                f"peak)")
        return self


LR_FLOOR = 1e-6
"""date.lr_floor's default: DATE's linear decay stops there."""


class DateSpec(_Section):
    """How DATE scales the baseline (docs/algorithm.md §2 and §6)."""

    rule: Literal["date", "paper"] = "date"
    """date: the rules per optimizer family (docs/algorithm.md §6): the peak LR's exponent, the
    second-moment decay, ε and decoupled weight decay scaled with the batch; paper: the SC'19 rule
    as printed (√k LR, LEGW), nothing else changed."""
    scaling: Literal["sqrt", "linear", "none"] | None = None
    """Peak LR, overriding the rule's: sqrt (η = √k·η0), linear (η = k·η0, Goyal et al.) or none
    (η = η0). Default: the rule's (the paper: sqrt)."""
    warmup: Literal["legw", "constant"] | None = None
    """legw: warmup epochs grow with the batch (w = k·w0); constant: w = w0, for comparisons.
    Default: legw."""
    warmup_shape: Literal["linear", "quadratic"] = "linear"
    """LR during warmup: η·(e/w) or η·(e/w)²."""
    lr_floor: float = Field(default=LR_FLOOR, ge=0.0)
    """η̂: the decay stops at this LR. It applies to DATE's own linear decay; a baseline schedule
    of another shape, or one that names its end, keeps its own unless this is set to another
    value than the default (a spec written out and read back, as a sweep's cells are, keeps
    that meaning)."""
    weight_decay: Literal["scaled", "fixed"] = "scaled"
    """rule date, decoupled weight decay (AdamW): scaled — λ·k^(1−p), so that the decay's
    timescale B/(η·λ) stays the same number of epochs; fixed — the baseline's λ, for comparisons."""
    second_moment: Literal["scaled", "fixed"] | None = None
    """rule date, adaptive optimizers: scaled — the second-moment decay β2 (Adam, AdamW, LAMB) or
    α (RMSprop) raised to the k-th power, so that its running average spans the same samples;
    fixed — the baseline's. Default: scaled, or at the batch a probe's branches measured
    (``date probe --batch``), the one they found best; a value given here overrides them."""
    layer_ratio: LayerRatioSpec = LayerRatioSpec()
    """Per-layer learning-rate ratios."""
    budget: Literal["same-epochs", "hold", "ramp"] = "same-epochs"
    """same-epochs: train the baseline's epochs at the target batch (k× fewer steps); hold: as
    many epochs as the probe's forecast says the target batch needs to reach the baseline's loss;
    ramp: start at a batch the problem can use and double it, up to the target, as the measured
    noise scale grows (docs/noise.md). hold and ramp need ``probe``."""
    ramp: Literal["measured", "planned"] = "measured"
    """budget ramp: measured — the run moves up to batch B_j once the noise scale it measures
    (once measurable and risen from its lowest) has reached B_j / ``ramp_reach`` (the probe's
    forecast start is the latest); planned — where the probe's curve puts each rung. measured
    needs two or more gradients per step (processes × accumulation steps); the trainer splits a
    ramp's stages so that they have them."""
    ramp_reach: float = Field(default=1.0, gt=0.0, le=64.0)
    """budget ramp: ρ — a rung B_j is reached once the noise scale is B_j / ρ (1: the batch
    never passes the noise scale, each stretch costs at most 2× its fewest samples; 2: up to
    twice it, at most 3× the samples, fewer steps; docs/noise.md)."""
    lr_cap: Literal["auto", "noise", "none"] = "auto"
    """rule date, with a probe: the LR grows with the batch only up to the noise scale the probe
    measured, η = η0·(min(B, B_cap)/B0)^p (B_cap: its fit at the end of its measurements).
    ``auto`` caps where it was measured and won: the adaptive family in the baseline's epochs
    (``date.budget: same-epochs``) with a probe whose LR check finds the baseline steps-limited
    (docs/results.md, "A cap at the noise scale"); ``noise`` with any probe; ``none`` never."""
    probe: PathText | None = None
    """probe.json written by ``date probe`` for this baseline (a path from the directory date
    runs in): the plan then forecasts what holding accuracy costs at the target batch."""


class TrainSpec(_Section):
    """Settings of the bundled trainer (``date scale``). None of them changes the plan's
    schedule."""

    micro_batch: Samples | Literal["auto"] | None = None
    """Samples per process per forward/backward pass; the rest of the batch is accumulation.
    Default: the recipe's, capped at each process's share of the batch. ``auto``: the largest
    that fits the device, found at the start of the run by trying (halving on out-of-memory), kept
    on resume."""
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    """Seed for model initialisation, data order and every process's random state."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Compute precision (bf16 and fp16 on CUDA only; fp16 runs with a GradScaler)."""
    output_dir: PathText | None = None
    """Where runs write checkpoints, metrics and reports (default: runs/<recipe>-B<batch>)."""
    data_dir: PathText | None = None
    """Where the recipe's data set lies on disk (recipes that read files)."""
    checkpoint_every: PositiveInt | None = None
    """Optimizer steps between checkpoints. Default: by time, see ``checkpoint_minutes``. One is
    always written at the end and when the run is stopped."""
    checkpoint_minutes: float = Field(default=10.0, gt=0.0)
    """Without ``checkpoint_every``: write a checkpoint once this many minutes have passed since
    the last one (the processes agree on the step)."""
    keep_checkpoints: PositiveInt = 2
    """How many of the newest checkpoints to keep."""
    log_every: PositiveInt = 10
    """Optimizer steps between lines of metrics.jsonl."""
    eval_every: PositiveInt | None = None
    """Optimizer steps between evaluations (default: only at the end)."""
    grad_clip: float | None = Field(default=None, gt=0.0)
    """Clip the global gradient norm to this value before each step (None: no clipping)."""
    num_workers: int = Field(default=0, ge=0)
    """DataLoader worker processes per training process."""
    spike_guard: bool = True
    """Roll a loss spike back (docs/training.md, "The spike guard"): where the loss (or the
    gradient norm) rises well above its running level and stays there, or turns non-finite, the
    run goes back to its last checkpoint and trains on with the LR lowered by
    ``spike_lr_factor``, at most three times; each rollback is recorded. False: train through."""
    spike_lr_factor: float = Field(default=0.5, gt=0.0, le=1.0)
    """What each rollback multiplies the LR by from then on."""
    parallel: Literal["ddp", "fsdp"] = "ddp"
    """How the processes hold the model: ``ddp`` replicates it (every process holds all
    parameters, gradients and optimizer state); ``fsdp`` shards all three over the processes with
    torch's FSDP2 (``fully_shard``), for models that do not fit one device. The plan (``date
    plan --parallel fsdp``) shows the bytes per process and the collectives of a step."""


class Spec(_Section):
    """A validated baseline spec. Build it with :func:`load_spec` or :func:`parse_spec`."""

    recipe: str | None = None
    """The registered recipe (model + data + metric) this baseline trains."""
    baseline: BaselineSpec
    """The working small-batch run."""
    date: DateSpec = DateSpec()
    """How to scale it."""
    train: TrainSpec = TrainSpec()
    """How the bundled trainer runs it."""
    model: dict[str, Any] = Field(default_factory=dict)
    """Options of the recipe's model and data (e.g. ``hidden: 256``); the recipe validates them."""

    @model_validator(mode="after")
    def _one_layer_ratio(self) -> Spec:
        name = self.baseline.optimizer.name
        if self.baseline.optimizer.family == "layerwise" and self.date.layer_ratio.mode != "off":
            raise ValueError(
                f"baseline.optimizer {name} applies its own per-layer trust ratio; set "
                "date.layer_ratio: {mode: off} (DATE's ratios would apply a second one)"
            )
        return self

    def fingerprint(self) -> str:
        """A short, stable hash of every setting that changes what training computes.

        Where a run writes, logs and checkpoints (and how many loader workers it uses) is left
        out, so a run can be resumed with other such settings; so are settings at their defaults,
        so that a run checkpointed by a version without a setting resumes under one that adds it
        (the plan, compared besides, catches a default that changed what runs).
        """
        data = self.model_dump(mode="json", exclude_defaults=True)
        for section, key in _NOT_FINGERPRINTED:
            data.get(section, {}).pop(key, None)
        canonical = json.dumps(data, sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


_NOT_FINGERPRINTED = (
    ("train", "parallel"),  # the plan names it when a checkpoint of the other kind is refused
    ("train", "output_dir"),
    ("train", "data_dir"),
    ("train", "checkpoint_every"),
    ("train", "checkpoint_minutes"),
    ("train", "keep_checkpoints"),
    ("train", "log_every"),
    ("train", "eval_every"),
    ("train", "num_workers"),
    ("train", "spike_guard"),  # a safety setting, like checkpointing: resumed without it
    ("train", "spike_lr_factor"),
    ("baseline", "tokens_per_sample"),  # what the plan counts in, not what it trains
)
"""(section, field) of the settings a run may be resumed with changed."""


# --------------------------------------------------------------------------------------------
# Loading


class _DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping that gives one key twice (YAML would silently keep the last)."""


class _Loader(yaml.SafeLoader):
    """YAML with the 1.2 core schema's scalars: only true/false are booleans (so ``mode: off``
    stays the string 'off', not False) and ``1e-3`` is a number. A key given twice in one mapping
    is an error, not a silent override."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: the base class says what is wrong
                continue
            if first != key_node.start_mark.line + 1:
                raise _DuplicateKey(None, None, f"'{key}' is given twice (also on line {first}); "
                                    "keep one", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


MAX_VALUES = 10_000
"""The most values (mappings, lists and scalars, each alias counted as what it stands for) a spec
may hold: a real one holds a few dozen, and a file of nested aliases ("billion laughs") would
otherwise expand past any memory in the checks that walk it."""


def _yaml(text: str, source: str) -> Any:
    """The YAML document in ``text``, once its node graph is known to be no cycle and to expand
    to at most :data:`MAX_VALUES` values — measured on the graph, in time linear in its size."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, source, {}, set(), ())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, source: str, sizes: dict[int, int], open_: set[int],
                   path: tuple[str, ...]) -> int:
    """How many values ``node`` stands for with every alias written out (memoised per node, so a
    shared node is counted, not walked, again); a SpecError for a node that contains itself or a
    document past :data:`MAX_VALUES`."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    where = ".".join(path) or "the top level"
    if key in open_:
        raise SpecError(f"{source}: {where} refers to itself through a YAML alias (&anchor ... "
                        "*anchor); write the value out.")
    open_.add(key)
    size = 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            size += _expanded_size(k, source, sizes, open_, path)
            size += _expanded_size(v, source, sizes, open_, (*path, str(k.value)))
    elif isinstance(node, yaml.SequenceNode):
        for i, child in enumerate(node.value):
            size += _expanded_size(child, source, sizes, open_, (*path, str(i)))
    open_.discard(key)
    if size > MAX_VALUES:
        raise SpecError(f"{source}: {where} expands to more than {MAX_VALUES:,} values through "
                        "its YAML aliases; a spec holds a few dozen — write the values out.")
    sizes[key] = size
    return size


def shipped_specs() -> dict[str, Path]:
    """The baseline YAMLs shipped with date_engine, by name (``lenet-mnist``, ``lstm-mnist-adam``,
    ...): what ``date plan NAME``, ``load_spec(NAME)`` and ``date recipes copy NAME`` find."""
    folder = Path(__file__).parent / "recipes" / "specs"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


def shipped_or_path(name: str | Path) -> Path:
    """``name`` as a path; a bare name that is no file here (``lenet-mnist``) as the shipped
    baseline of that name, or a :class:`SpecError` listing them."""
    path = Path(name)
    if str(name).strip() and not path.exists() and path.suffix == "" and len(path.parts) == 1:
        shipped = shipped_specs()
        if str(name) not in shipped:
            raise SpecError(f"{name}: no such file, and no shipped baseline of that name; give "
                            f"a YAML path, or one of {', '.join(shipped)}.")
        return shipped[str(name)]
    return path


def load_spec(path: str | Path, overrides: Iterable[str] = ()) -> Spec:
    """Read a baseline YAML (or a shipped baseline by name: ``load_spec("lenet-mnist")``), apply
    ``key=value`` overrides (dotted keys) and validate it.

    Raises :class:`SpecError` with one sentence naming the file, the field and the fix.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"load_spec takes the path of a baseline YAML (str or Path), got "
                        f"{type(path).__name__}; parse_spec takes an already-parsed mapping.")
    path = shipped_or_path(path)
    overrides = [overrides] if isinstance(overrides, str) else list(overrides)
    text = read_small_text(path, "spec", "pass the path of a baseline YAML (see recipes/)",
                           limit=1 << 20, error=SpecError)
    try:
        raw = _yaml(text, str(path))
    except _DuplicateKey as exc:
        mark = exc.problem_mark
        raise SpecError(f"{path}: line {mark.line + 1}, column {mark.column + 1}: "
                        f"{exc.problem}.") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: {_yaml_problem(exc)}") from None
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a spec; check its YAML aliases.") \
            from None
    return parse_spec(raw, overrides=overrides, source=str(path))


def parse_spec(raw: Any, overrides: Iterable[str] = (), source: str = "<spec>") -> Spec:
    """Validate an already-parsed mapping (``source`` names it in error messages)."""
    overrides = [overrides] if isinstance(overrides, str) else list(overrides)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise SpecError(
            f"{source}: expected a mapping with keys recipe, baseline, date and train at the top "
            f"level, got a {_type_name(raw)}."
        )
    data = apply_overrides(raw, overrides)
    overridden = {key for key, _ in (_split_override(o) for o in overrides)}
    try:
        return Spec.model_validate(data)
    except ValidationError as exc:
        lines = [describe_error(err, overridden) for err in exc.errors()]
        raise SpecError(f"{source}: " + "\n".join(lines)) from None


def apply_overrides(raw: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a deep copy of ``raw`` with each ``section.key=value`` set (value parsed as YAML)."""
    data = _deep_copy(raw)
    for override in overrides:
        key, value = _split_override(override)
        parts = key.split(".")
        node = data
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                prefix = ".".join(parts[: depth + 1])
                raise SpecError(
                    f"{_set(override)}: '{prefix}' holds a value ({child!r}), not a section; "
                    f"set '{prefix}=...' instead."
                )
            node = child
        node[parts[-1]] = value
    return data


def _set(override: str) -> str:
    """An override as the user gave it: ``--set KEY=VALUE`` or ``overrides 'KEY=VALUE'``."""
    return f"{named('overrides', '--set')} {override!r}"


def _split_override(override: str) -> tuple[str, Any]:
    key, sep, text = override.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise SpecError(
            f"{_set(override)}: expected key=value with a dotted key, e.g. "
            f"{_set('baseline.lr=0.1')} or {_set('date.scaling=linear')}."
        )
    try:
        value = _yaml(text, _set(override)) if text.strip() else None
    except yaml.YAMLError:
        raise SpecError(
            f"{_set(override)}: the value is not valid YAML; quote it, e.g. {_set(key + '=...')}."
        ) from None
    return key, value


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# Error messages: one sentence per problem, naming the field and the fix.


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return (f"{where}malformed YAML ({problem}); check the indentation and the 'key: value' "
            "pairs there.")


def describe_error(
    err: Mapping[str, Any], overridden: Iterable[str] = (), prefix: tuple[str, ...] = ()
) -> str:
    """One pydantic validation error as a sentence naming the field (``prefix`` + its location)
    and the fix; ``overridden`` are the dotted keys set by ``--set``."""
    loc = prefix + tuple(str(part) for part in err["loc"])
    field = ".".join(loc) or "spec"
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = err.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        elsewhere = [
            ".".join(s) for s in _sections() if s != loc[:-1] and loc[-1] in _allowed_keys(s)
        ]
        close = difflib.get_close_matches(loc[-1], allowed, n=1)
        if elsewhere:
            hint = f"'{loc[-1]}' belongs under {elsewhere[0]}; "
        else:
            hint = f"did you mean '{close[0]}'? " if close else ""
        text = f"{field}: unknown key; {hint}allowed here: {', '.join(allowed)}."
    elif kind == "missing":
        text = f"{field}: required but missing; add it{_example(loc)}."
    elif kind in ("int_parsing", "int_type", "int_from_float"):
        text = f"{field}: expected a whole number, got {got!r}."
    elif kind in ("float_parsing", "float_type", "finite_number"):
        text = f"{field}: expected a number, got {got!r}."
    elif kind in ("bool_parsing", "bool_type"):
        text = f"{field}: expected true or false, got {got!r}."
    elif kind in ("string_type",):
        text = f"{field}: expected text, got {got!r}."
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bound = {
            "greater_than": "> {gt}",
            "greater_than_equal": ">= {ge}",
            "less_than": "< {lt}",
            "less_than_equal": "<= {le}",
        }[kind].format(**ctx)
        text = f"{field}: must be {bound}, got {got!r}."
    elif kind == "literal_error":
        text = f"{field}: must be one of {ctx.get('expected')}, got {got!r}."
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        text = f"{field}: expected a section of 'key: value' pairs, got {got!r}."
    elif kind in ("tuple_type", "list_type", "too_short", "too_long"):
        text = f"{field}: {err['msg'].lower()}, got {got!r}."
    elif kind == "value_error":
        reason = str(ctx.get("error", err["msg"]))
        text = f"{field}: {reason}." if loc else f"{reason}."  # a whole-spec rule names its fields
    else:
        text = f"{field}: {err['msg']} (got {got!r})."
    if field in overridden or any(field.startswith(o + ".") for o in overridden):
        text = text[:-1] + f" (set by {named('overrides', '--set')})."
    return text


def _allowed_keys(loc: tuple[str, ...]) -> list[str]:
    model: type[BaseModel] | None = Spec
    for part in loc:
        info = model.model_fields.get(part) if model is not None else None
        model = _model_of(info.annotation) if info is not None else None
    return list(model.model_fields) if model is not None else []


def _sections(
    model: type[BaseModel] | None = None, prefix: tuple[str, ...] = ()
) -> list[tuple[str, ...]]:
    """Dotted paths of every section (nested model) of the spec, the top level included."""
    model = model or Spec
    found = [prefix]
    for name, info in model.model_fields.items():
        sub = _model_of(info.annotation)
        if sub is not None:
            found += _sections(sub, prefix + (name,))
    return found


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


_EXAMPLES = {
    "baseline": ": baseline: {batch_size: 256, lr: 0.1, warmup_epochs: 1, epochs: 90}",
    "batch_size": ", e.g. batch_size: 256",
    "lr": ", e.g. lr: 0.1",
    "warmup_epochs": ", e.g. warmup_epochs: 1 (0 for no warmup)",
}


def _example(loc: tuple[str, ...]) -> str:
    return _EXAMPLES.get(loc[-1], "") if loc else ""


def _type_name(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def spec_with(spec: Spec | str | Path, overrides: Iterable[str] = (), *,
              probe: str | Path | None = None, budget: str | None = None,
              parallel: str | None = None) -> Spec:
    """``spec`` (a Spec, a YAML path or a shipped baseline's name) with ``key=value`` overrides,
    then ``probe``, ``budget`` and ``parallel`` set (date.probe, date.budget, train.parallel)."""
    if isinstance(overrides, bytes) or not isinstance(overrides, (str, Iterable)):
        expect(overrides, list, "overrides", "a list of key=value strings")
    overrides = [overrides] if isinstance(overrides, str) else list(overrides)
    for override in overrides:
        expect(override, str, "overrides", "a list of key=value strings (e.g. 'baseline.lr=0.1')")
    if parallel is not None:
        overrides.append(f"train.parallel={json.dumps(parallel)}")
    if probe is not None:  # absolute, so that every process and sweep cell finds it
        overrides.append(f"date.probe={json.dumps(str(Path(probe).absolute()))}")
    if budget is not None:
        budgets = get_args(DateSpec.model_fields["budget"].annotation)
        if budget not in budgets:
            raise SpecError(f"{named('budget', '--budget')}: must be one of "
                            f"{', '.join(budgets)}; got {budget!r}.")
        overrides.append(f"date.budget={json.dumps(budget)}")
    expect(spec, (Spec, str, Path), "spec", "a Spec (baseline(...), load_spec(...)), a YAML "
           "path or a shipped baseline's name")
    if isinstance(spec, Spec):
        if not overrides:
            return spec
        return parse_spec(spec.model_dump(mode="json", exclude_none=True), overrides)
    return load_spec(spec, overrides)
