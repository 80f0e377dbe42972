"""Build the optimizer a spec describes: its base optimizer, wrapped in DATE."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from date_engine.optim.date import DATE
from date_engine.optim.lamb import LAMB
from date_engine.optim.lars import LARS
from date_engine.spec import LAYERWISE_OPTIMIZERS, LayerRatioSpec, OptimizerSpec

__all__ = ["build_base_optimizer", "build_optimizer"]


def build_base_optimizer(params: Iterable[Any], spec: OptimizerSpec, lr: float) -> torch.optim.Optimizer:
    """The torch optimizer named by ``spec`` (sgd, momentum, nesterov, adagrad, rmsprop, adam,
    adamw; or this package's lars, lamb) at learning rate ``lr``, with the spec's options over the
    defaults."""
    opts = spec.options()
    if spec.name in LAYERWISE_OPTIMIZERS:
        cls = LARS if spec.name == "lars" else LAMB
        return cls(_trust_ratio_groups(params), lr=lr, **opts)
    if spec.name in ("sgd", "momentum"):
        return torch.optim.SGD(params, lr=lr, **opts)
    if spec.name == "nesterov":
        return torch.optim.SGD(params, lr=lr, nesterov=True, **opts)
    cls = {"adagrad": torch.optim.Adagrad, "rmsprop": torch.optim.RMSprop,
           "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[spec.name]
    return cls(params, lr=lr, **opts)


def _trust_ratio_groups(params: Iterable[Any]) -> list[dict[str, Any]]:
    """LARS/LAMB param groups: as usual for these optimizers, biases and other tensors with
    ``ndim <= 1`` take the plain update (no trust ratio), as DATE leaves them unadapted too."""
    items = [p if isinstance(p, tuple) else (None, p) for p in params]
    groups = [
        {"params": [p for _, p in items if p.ndim > 1], "layer_ratio": True},
        {"params": [p for _, p in items if p.ndim <= 1], "layer_ratio": False},
    ]
    return [g for g in groups if g["params"]]


def build_optimizer(
    params: Iterable[Any],
    optimizer: OptimizerSpec,
    layer_ratio: LayerRatioSpec,
    lr: float,
) -> torch.optim.Optimizer:
    """DATE over the spec's base optimizer (LARS and LAMB as they are: they adapt per layer
    themselves). Pass ``model.named_parameters()`` so that DATE knows parameter names; ``lr`` is
    normally the plan's peak LR, scaled step by step by the schedule."""
    base = build_base_optimizer(params, optimizer, lr)
    if optimizer.name in LAYERWISE_OPTIMIZERS:
        return base
    return DATE(
        base,
        mode=layer_ratio.mode,
        gamma=layer_ratio.resolved_gamma,
        trust_coefficient=layer_ratio.resolved_trust_coefficient,
        lower=layer_ratio.resolved_lower,
        upper=layer_ratio.resolved_upper,
    )
