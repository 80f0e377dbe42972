"""LARS (You, Gitman & Ginsburg, 2017), as docs/algorithm.md §4 states it, for comparisons.

Per parameter tensor, with trust ratio r = c·φ(||w||) / (||g|| + λ||w||)  (r = 1 if a norm is 0):

    m ← β·m + η·r·(g + λ·w)
    w ← w − m

φ is the identity, or a clamp to ``phi_bounds``. A param group with ``layer_ratio=False`` keeps
r = 1 (plain momentum SGD with the LR inside the momentum). No host synchronisation in ``step``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from date_engine.optim._tensors import LayerwiseOptimizer, decay_add_, like, norms, scalars
from date_engine.optim.ratios import trust_ratio

__all__ = ["LARS"]


class LARS(LayerwiseOptimizer):
    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        trust_coefficient: float = 1.0,
        phi_bounds: tuple[float, float] | None = None,
    ) -> None:
        if lr <= 0 or not 0 <= momentum < 1 or weight_decay < 0 or trust_coefficient <= 0:
            raise ValueError(f"invalid LARS settings: lr={lr}, momentum={momentum}, "
                             f"weight_decay={weight_decay}, trust_coefficient={trust_coefficient}")
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, layer_ratio=True,
                        trust_coefficient=trust_coefficient, phi_bounds=phi_bounds)
        super().__init__(params, defaults)

    def _update(self, params: list[Tensor], group: dict[str, Any]) -> None:
        lr, beta, wd = group["lr"], group["momentum"], group["weight_decay"]
        grads = [p.grad for p in params]
        if group["layer_ratio"]:
            r = trust_ratio(
                norms(params), norms(grads), wd, group["trust_coefficient"], group["phi_bounds"]
            )
        else:
            r = torch.ones(len(params), device=params[0].device)
        step = lr * like(r, params[0])
        bufs = []
        for p in params:
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p)
            bufs.append(state["momentum_buffer"])
        decay_add_(bufs, grads, beta, step)
        if wd != 0:
            torch._foreach_addcmul_(bufs, params, scalars(step * wd))
        torch._foreach_sub_(params, bufs)
