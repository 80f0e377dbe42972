"""Build the optimizer a plan names: its base optimizer (from the catalog), wrapped in DATE."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from date_engine.catalog import CATALOG, LAYER_RATIO_DEFAULTS, OptimizerSettings, entry
from date_engine.errors import ArgumentError, expect
from date_engine.optim.date import DATE
from date_engine.plan import Plan
from date_engine.runplan import RunPlan, plan_of

__all__ = ["build_base_optimizer", "build_optimizer", "optimizer_for", "state_bytes"]


def build_base_optimizer(params: Iterable[Any], name: str, options: Mapping[str, Any],
                         lr: float, decay_exempt: bool = False) -> torch.optim.Optimizer:
    """The optimizer the catalog calls ``name`` at learning rate ``lr`` with ``options`` (every
    option of that name; see :meth:`date_engine.spec.OptimizerSpec.options`). ``decay_exempt``:
    biases and norm weights (tensors of one dimension or fewer) in a group of their own without
    weight decay, as HF's Trainer, nanoGPT and timm make them."""
    record = entry(name)
    cls = record.load_class()
    if record.family == "layerwise":
        params = _trust_ratio_groups(params, decay_exempt)
    else:
        params = list(params)
        if not {"fused", "foreach"} & set(options):
            options = {**_fastest_step(cls, params), **options}
        if decay_exempt and options.get("weight_decay"):
            params = _by_ndim(params, {}, _NO_DECAY)
    return cls(params, lr=lr, **record.fixed, **options)


def _by_ndim(params: Iterable[Any], matrices: dict[str, Any], vectors: dict[str, Any]
             ) -> list[dict[str, Any]]:
    """Each param group (or the one the tensors make) split in two: tensors of two or more
    dimensions with ``matrices`` added to the group's settings, the others (biases, norm weights)
    with ``vectors``; named parameters stay named; empty groups left out."""
    given = list(params)
    groups = given if given and isinstance(given[0], dict) else [{"params": given}]
    out = []
    for group in groups:
        settings = {k: v for k, v in group.items() if k != "params"}
        items = list(group["params"])
        out += [{**settings, "params": [t for t in items if _ndim(t) > 1], **matrices},
                {**settings, "params": [t for t in items if _ndim(t) <= 1], **vectors}]
    return [g for g in out if g["params"]]


def _ndim(item: Any) -> int:
    return (item[1] if isinstance(item, tuple) else item).ndim


def _fastest_step(cls: type, params: list[Any]) -> dict[str, bool]:
    """torch's fastest step for this base and these tensors: ``fused=True`` where torch has a fused
    kernel for the class and the tensors' device (Adam, AdamW, SGD, AdaGrad on the CPU and CUDA);
    else ``foreach=True`` (multi-tensor passes). torch's own default on the CPU is a Python loop
    over tensors (docs/performance.md). DATE's per-layer step ignores these flags where it scales
    the layers; the base's own step (``layer_ratio: off``) runs with them."""
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    items = [t for p in params for t in (p["params"] if isinstance(p, dict) else [p])]
    tensors = [t[1] if isinstance(t, tuple) else t for t in items]
    signature = inspect.signature(cls.__init__).parameters
    fusable = (
        "fused" in signature
        and all(t.is_floating_point() for t in tensors)
        and {t.device.type for t in tensors} <= set(_get_fused_kernels_supported_devices())
    )
    if fusable:
        return {"fused": True}
    return {"foreach": True} if "foreach" in signature else {}


def _trust_ratio_groups(params: Iterable[Any], decay_exempt: bool = False
                        ) -> list[dict[str, Any]]:
    """LARS/LAMB param groups: as usual for these optimizers, biases and other tensors with
    ``ndim <= 1`` take the plain update (no trust ratio), as DATE leaves them unadapted too (and
    no weight decay with ``decay_exempt``)."""
    tensors = [p[1] if isinstance(p, tuple) else p for p in params]
    return _by_ndim(tensors, {"layer_ratio": True},
                    {"layer_ratio": False, **(_NO_DECAY if decay_exempt else {})})


_NO_DECAY = {"weight_decay": 0.0, "decay_exempt": True}
"""The group of biases and norm weights where the baseline's trainer exempts them; the key
``decay_exempt`` keeps a batch ramp's λ (schedule.set_lr) out of it."""


def build_optimizer(params: Iterable[Any], settings: Any, lr: float) -> torch.optim.Optimizer:
    """DATE over the base optimizer ``settings`` names (a plan's
    :class:`~date_engine.plan.OptimizerSettings`: ``name``, ``options``, ``layer_ratio``; or just
    a catalog name such as ``"adam"``, for its defaults and DATE's); LARS and LAMB as they are,
    since they adapt per layer themselves. Pass ``model.named_parameters()`` so that DATE knows
    parameter names; ``lr`` is normally the plan's peak LR, scaled step by step by the schedule."""
    if not isinstance(settings, (str, OptimizerSettings)):
        raise TypeError(f"build_optimizer: settings must be a plan's optimizer (plan.optimizer) "
                        f"or a catalog name such as 'adam', got {type(settings).__name__}.")
    if isinstance(settings, str):
        if settings not in CATALOG:
            raise ValueError(f"no optimizer {settings!r}; known: {', '.join(CATALOG)}")
        record = CATALOG[settings]
        mode = "off" if record.family == "layerwise" else "dynamic"
        settings = OptimizerSettings(settings, dict(record.defaults),
                                     {"mode": mode, **LAYER_RATIO_DEFAULTS[mode]})
    base = build_base_optimizer(params, settings.name, settings.options, lr,
                                settings.decay_exempt)
    if CATALOG[settings.name].family == "layerwise":
        return base
    return DATE(base, **settings.layer_ratio)


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """The bytes an optimizer keeps between steps: its state (a DATE's is its base's) and its
    per-parameter buffers (DATE's scratch, LAMB's update)."""
    tensors = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    tensors += list(getattr(optimizer, "_scratch", {}).values())
    tensors += list(getattr(optimizer, "_u", {}).values())
    return sum(t.numel() * t.element_size() for t in tensors if t.dim() > 0)


def optimizer_for(model: torch.nn.Module | Iterable[Any], run: RunPlan | Plan, *,
                  date: bool = True) -> torch.optim.Optimizer:
    """The optimizer the plan derived, at its peak LR: DATE's per-layer ratios over the base
    optimizer with the plan's options (β2, ε, λ, ...); with ``date=False`` the base alone (the
    same options, no ratios). ``model``: a module, or its ``named_parameters()``."""
    plan = plan_of(run, "optimizer_for")
    expect(date, bool, "optimizer_for: date", "True (DATE's ratios) or False (the base alone)")
    if isinstance(model, torch.nn.Module):
        params = list(model.named_parameters())
    else:
        params = list(_iterable(model, "optimizer_for: model",
                                "parameters: a torch module, or its named_parameters()"))
    if not any(getattr(p, "requires_grad", False) for p in _tensors(params)):
        raise ArgumentError("optimizer_for: model has no parameters to train (none requires "
                            "grad); pass the model after its layers are built.")
    if date:
        return build_optimizer(params, plan.optimizer, plan.peak_lr)
    return build_base_optimizer(params, plan.optimizer.name, plan.optimizer.options,
                                plan.peak_lr, plan.optimizer.decay_exempt)


def _iterable(value: Any, parameter: str, what: str) -> Iterable[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        expect(value, list, parameter, f"a list of {what}")
    return value


def _tensors(params: list[Any]) -> Iterable[Any]:
    """The parameters of ``params``: bare, (name, parameter) pairs, or param groups of either."""
    for item in params:
        if isinstance(item, dict):
            yield from _tensors(list(item.get("params", ())))
        else:
            yield item[1] if isinstance(item, tuple) and len(item) == 2 else item
