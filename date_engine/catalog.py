"""The optimizer catalog: every base optimizer date_engine knows, in one torch-free table.

One record per optimizer holds all that the rest of the code needs to know about it:

- the spec (:mod:`date_engine.spec`) reads which options a name takes and their defaults;
- the factory (:mod:`date_engine.optim.build`) reads which class to build and what the name fixes
  (``nesterov`` is ``torch.optim.SGD`` with ``nesterov=True``);
- :class:`~date_engine.optim.DATE` reads where its per-layer ratio enters the base's step;
- the sweep's schemes read which optimizers bring their own trust ratio (LARS, LAMB).

Classes are named as ``"module:Class"`` strings, imported only by :meth:`OptimizerEntry.load_class`,
so that importing the catalog imports no torch.
The defaults of DATE's layer-ratio rules (docs/algorithm.md §3) live here too.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

__all__ = ["CATALOG", "LAYER_RATIO_DEFAULTS", "BatchRule", "Family", "OptimizerEntry",
           "OptimizerSettings", "Placement", "entry", "spec_names", "state_tensors", "step_path"]

Family = Literal["sgd", "adaptive", "layerwise"]
"""sgd: the step is lr × (momentum of) the gradient; adaptive: the gradient is normalised per
element by its running second moment; layerwise: the optimizer applies its own trust ratio."""

Placement = Literal["gradient", "update"]
"""Where DATE's ratio r_l enters the base's step (docs/algorithm.md §3): it scales the layer's
gradient (SGD family, the LARS placement) or the base's update (adaptive: a scaled gradient would
cancel inside their normalisation)."""


@dataclass(frozen=True)
class BatchRule:
    """How the default rule (``date.rule: date``) scales an optimizer family's hyper-parameters
    with k = B/B0 (docs/algorithm.md §6). The paper's rule (``date.rule: paper``) uses none of
    it."""

    lr_exponent: float
    """η = k^p · η0."""
    lr_reason: str
    """Why p, in one line, with the source."""
    second_moment: str | None = None
    """The option holding the second-moment decay β2, run at β2^k (the same half-life in samples):
    ``alpha`` (RMSprop) or ``betas`` (its second entry: Adam, AdamW, LAMB); None if none."""
    scale_eps: bool = False
    """ε → ε/√k (the SDE scaling rule of adaptive methods)."""
    decoupled_decay: bool = False
    """λ → λ·k^(1−p): AdamW's decoupled weight decay keeps its timescale in epochs."""
    probed_exponent: float | None = None
    """p where a probe's LR check found room (twice the baseline's LR trained it faster,
    :class:`~date_engine.probe.LRCheck`); None: ``lr_exponent`` whatever the probe."""
    probed_reason: str = ""
    """Why ``probed_exponent``, in one line, with the source."""


@dataclass(frozen=True)
class OptimizerEntry:
    name: str
    """The name a spec uses (``baseline.optimizer.name``)."""
    family: Family
    cls: str
    """``module:Class`` of the optimizer built for this name."""
    defaults: Mapping[str, Any]
    """Every option the name accepts, with the default used when the spec is silent (torch's)."""
    fixed: Mapping[str, Any] = field(default_factory=dict)
    """Constructor arguments the name itself implies."""
    in_spec: bool = True
    """False for classes DATE knows how to wrap but a spec cannot name."""
    batch_rule: BatchRule | None = None
    """How the default rule scales this optimizer's hyper-parameters with the batch."""

    def load_class(self) -> type:
        """Import and return the class this record names (imports torch)."""
        module, _, name = self.cls.partition(":")
        return getattr(importlib.import_module(module), name)

    @property
    def placement(self) -> Placement | None:
        """Where DATE's ratio enters; None for layerwise optimizers, which DATE does not wrap."""
        return {"sgd": "gradient", "adaptive": "update", "layerwise": None}[self.family]


# The default rule per family, decided by the studies of docs/results.md (§ "Rules per optimizer
# family"); each reason names its evidence.
SGD_RULE = BatchRule(1.0, "k× keeps your run's noise (algorithm.md §6)")
ADAPTIVE_RULE = BatchRule(
    0.5, "√k keeps your run's update noise (algorithm.md §6)",
    second_moment="alpha", scale_eps=True, probed_exponent=0.75,
    probed_reason="your probe found room above √k (algorithm.md §6)")
ADAGRAD_RULE = BatchRule(
    0.5, "√k, the paper's, held best (algorithm.md §6)")


def _entry(name: str, family: Family, cls: str, in_spec: bool = True,
           fixed: Mapping[str, Any] | None = None, rule: BatchRule | None = None,
           **defaults: Any) -> OptimizerEntry:
    return OptimizerEntry(name, family, cls, MappingProxyType(defaults),
                          MappingProxyType(dict(fixed or {})), in_spec, rule)


def _with(rule: BatchRule, **changes: Any) -> BatchRule:
    return replace(rule, **changes)


CATALOG: Mapping[str, OptimizerEntry] = MappingProxyType({e.name: e for e in (
    _entry("sgd", "sgd", "torch.optim:SGD", rule=SGD_RULE, weight_decay=0.0),
    _entry("momentum", "sgd", "torch.optim:SGD", rule=SGD_RULE, momentum=0.9, dampening=0.0,
           weight_decay=0.0),
    _entry("nesterov", "sgd", "torch.optim:SGD", fixed={"nesterov": True}, rule=SGD_RULE,
           momentum=0.9, weight_decay=0.0),
    _entry("adagrad", "adaptive", "torch.optim:Adagrad", rule=ADAGRAD_RULE, lr_decay=0.0,
           weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10),
    _entry("rmsprop", "adaptive", "torch.optim:RMSprop", rule=ADAPTIVE_RULE, alpha=0.99, eps=1e-8,
           weight_decay=0.0, momentum=0.0, centered=False),
    _entry("adam", "adaptive", "torch.optim:Adam", rule=_with(ADAPTIVE_RULE, second_moment="betas"),
           betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False),
    _entry("adamw", "adaptive", "torch.optim:AdamW",
           rule=_with(ADAPTIVE_RULE, second_moment="betas", decoupled_decay=True),
           betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False),
    # the comparison optimizers of docs/algorithm.md §4: they adapt per layer themselves
    _entry("lars", "layerwise", "date_engine.optim.lars:LARS", rule=SGD_RULE, momentum=0.9,
           weight_decay=0.0, phi_bounds=None),
    _entry("lamb", "layerwise", "date_engine.optim.lamb:LAMB",
           rule=_with(ADAPTIVE_RULE, second_moment="betas"), betas=(0.9, 0.999), eps=1e-6,
           weight_decay=0.0, phi_bounds=None),
    # torch's other adaptive optimizers (Rprop: sign-based): DATE wraps them with the update
    # placement; specs cannot name them
    *(_entry(name.lower(), "adaptive", f"torch.optim:{name}", in_spec=False)
      for name in ("Adamax", "NAdam", "RAdam", "Adadelta", "Rprop")),
)})

@dataclass(frozen=True)
class OptimizerSettings:
    """The optimizer a run builds: the base optimizer with every option as it runs, and DATE's
    per-layer ratio rule with its options (docs/algorithm.md §3)."""

    name: str
    options: dict[str, Any]
    layer_ratio: dict[str, Any]
    """``{"mode": ..., **that mode's options}``."""
    decay_exempt: bool = False
    """Weight decay spares biases and norm weights (tensors of one dimension or fewer)."""

    def __post_init__(self) -> None:  # JSON turns tuples (Adam's betas) into lists: undo that
        tuples = {k: tuple(v) if isinstance(v, list) else v for k, v in self.options.items()}
        object.__setattr__(self, "options", tuples)


LAYER_RATIO_DEFAULTS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        # clamp(ρ/m, 1/γ, γ); γ = 8 chosen by experiment: docs/layer_ratios.md
        "dynamic": MappingProxyType({"gamma": 8.0}),
        # clamp(c·ρ, lower, upper): Algorithm 1 read literally, c being LARS's trust coefficient
        "static": MappingProxyType({"trust_coefficient": 1e-3, "lower": 0.0, "upper": 10.0}),
        "off": MappingProxyType({}),
    }
)
"""Each layer-ratio mode's options and their defaults (docs/algorithm.md §3)."""


def spec_names() -> tuple[str, ...]:
    """The optimizer names a spec may use, in catalog order."""
    return tuple(name for name, e in CATALOG.items() if e.in_spec)


def entry(name: str) -> OptimizerEntry:
    """The catalog record of ``name``; KeyError names the known ones."""
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(
            f"no optimizer {name!r} in the catalog; known: {', '.join(CATALOG)}"
        ) from None


# torch's fused kernel each optimizer's per-layer step runs through on the CPU
# (date_engine/optim/_fused.py; tests/test_optim_date.py holds this table to what runs)
_HOST_KERNELS = {
    "sgd": "SGD", "momentum": "SGD", "adagrad": "AdaGrad", "adam": "Adam", "adamw": "AdamW",
    "rmsprop": "Adam (β1 = 0, no bias correction)", "lars": "SGD", "lamb": "AdamW",
}

# bases torch has a fused step for, on the CPU and CUDA; built with fused=True (optim/build.py)
_TORCH_FUSED = frozenset({"sgd", "momentum", "nesterov", "adagrad", "adam", "adamw"})


def step_path(name: str, options: Mapping[str, Any], mode: str) -> tuple[str, str]:
    """How a step of this optimizer runs on the CPU: ``("fused" | "foreach" | "off", why)``.

    "fused": torch's fused kernel once per layer at the layer's rate; "foreach": multi-tensor
    passes (always the path on accelerators); "off": the base optimizer's own step (fused where
    torch has a fused kernel for it)."""
    if mode == "off" and entry(name).family != "layerwise":
        how = "fused kernel" if name in _TORCH_FUSED else "multi-tensor passes"
        return "off", f"{name}'s own torch step, its {how} (no per-layer ratios)"
    kernel = _HOST_KERNELS.get(name)
    if name == "rmsprop" and (options.get("momentum") or options.get("centered")):
        kernel = None
    if kernel is None:
        return "foreach", f"{name}'s update at each layer's rate, in multi-tensor passes"
    return "fused", (f"{name}'s update at each layer's rate: a fused torch kernel per layer on "
                     "CPUs, multi-tensor passes on GPUs")


def state_tensors(name: str, options: Mapping[str, Any]) -> int:
    """How many tensors of a parameter's shape the optimizer keeps per parameter (its step
    counters aside): what its state costs in memory, as a multiple of the parameters."""
    momentum = 1 if options.get("momentum") else 0
    if name in ("adam", "adamw"):
        return 3 if options.get("amsgrad") else 2
    if name == "lamb":
        return 2
    if name == "rmsprop":
        return 1 + momentum + (1 if options.get("centered") else 0)
    if name == "adagrad":
        return 1
    return momentum  # sgd, momentum, nesterov, lars: the momentum buffer, if any
