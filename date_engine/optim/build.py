"""Build the optimizer a spec describes: its base optimizer, wrapped in DATE."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from date_engine.optim.date import DATE
from date_engine.spec import LayerRatioSpec, OptimizerSpec

__all__ = ["build_base_optimizer", "build_optimizer"]


def build_base_optimizer(params: Iterable[Any], spec: OptimizerSpec, lr: float) -> torch.optim.Optimizer:
    """The torch optimizer named by ``spec`` (sgd, momentum, nesterov, adagrad, rmsprop, adam,
    adamw) at learning rate ``lr``, with the spec's options over torch's defaults."""
    opts = spec.options()
    if spec.name in ("sgd", "momentum"):
        return torch.optim.SGD(params, lr=lr, **opts)
    if spec.name == "nesterov":
        return torch.optim.SGD(params, lr=lr, nesterov=True, **opts)
    cls = {"adagrad": torch.optim.Adagrad, "rmsprop": torch.optim.RMSprop,
           "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[spec.name]
    return cls(params, lr=lr, **opts)


def build_optimizer(
    params: Iterable[Any],
    optimizer: OptimizerSpec,
    layer_ratio: LayerRatioSpec,
    lr: float,
) -> DATE:
    """DATE over the spec's base optimizer. Pass ``model.named_parameters()`` so that DATE knows
    parameter names; ``lr`` is normally the plan's peak LR, scaled step by step by the schedule."""
    base = build_base_optimizer(params, optimizer, lr)
    return DATE(
        base,
        mode=layer_ratio.mode,
        gamma=layer_ratio.resolved_gamma,
        trust_coefficient=layer_ratio.resolved_trust_coefficient,
        lower=layer_ratio.resolved_lower,
        upper=layer_ratio.resolved_upper,
    )
