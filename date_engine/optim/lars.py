"""LARS (You, Gitman & Ginsburg, 2017), as docs/algorithm.md §4 states it, for comparisons.

Per parameter tensor, with trust ratio r = c·φ(||w||) / (||g|| + λ||w||)  (r = 1 if a norm is 0):

    m ← β·m + η·r·(g + λ·w)
    w ← w − m

φ is the identity, or a clamp to ``phi_bounds``. A param group with ``layer_ratio=False`` keeps
r = 1 (plain momentum SGD with the LR inside the momentum).

On the CPU each layer takes its norms and then one call of torch's fused SGD kernel
(:func:`date_engine.optim._fused.lars_step_`), layer after layer, so the update reads what the norms
just read while it is still in cache: on ResNet-50's shapes 33.6 ms against 39.8 ms for all norms
first, then all updates (benchmarks/optimizer_step.py, docs/performance.md). Elsewhere the update
runs as multi-tensor passes with no host synchronisation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from date_engine.optim._fused import host_kernels, lars_step_, norm
from date_engine.optim._tensors import (
    LayerwiseOptimizer,
    decay_add_,
    is_sharded,
    like,
    local,
    norms,
    scalars,
    sharded_norms,
)
from date_engine.optim.ratios import trust_ratio, trust_ratio_value

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
        fused: bool | None = None,
    ) -> None:
        if lr <= 0 or not 0 <= momentum < 1 or weight_decay < 0 or trust_coefficient <= 0:
            raise ValueError(f"invalid LARS settings: lr={lr}, momentum={momentum}, "
                             f"weight_decay={weight_decay}, trust_coefficient={trust_coefficient}")
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, layer_ratio=True,
                        trust_coefficient=trust_coefficient, phi_bounds=phi_bounds)
        super().__init__(params, defaults)
        self.fused = fused is not False
        """Take the fused per-layer host path where it serves (``fused=False``: never)."""

    def _buffers(self, params: list[Tensor]) -> list[Tensor]:
        bufs = []
        for p in params:
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p)
            bufs.append(state["momentum_buffer"])
        return bufs

    def _update(self, params: list[Tensor], group: dict[str, Any]) -> None:
        self.implementation = "fused" if self.fused and host_kernels(params, "sgd") else "foreach"
        if self.implementation == "fused":
            self._update_host(params, group)
            return
        lr, beta, wd = group["lr"], group["momentum"], group["weight_decay"]
        grads = [p.grad for p in params]
        if group["layer_ratio"]:
            w, g = sharded_norms(params, grads) if is_sharded(params[0]) else \
                (norms(params), norms(grads))
            r = trust_ratio(w, g, wd, group["trust_coefficient"], group["phi_bounds"])
        else:
            r = torch.ones(len(params), device=params[0].device)
        bufs = [local(b) for b in self._buffers(params)]  # a DTensor's shard: elementwise below
        params, grads = [local(p) for p in params], [local(g) for g in grads]
        step = lr * like(r, params[0])
        decay_add_(bufs, grads, beta, step)
        if wd != 0:
            torch._foreach_addcmul_(bufs, params, scalars(step * wd))
        torch._foreach_sub_(params, bufs)

    def _update_host(self, params: list[Tensor], group: dict[str, Any]) -> None:
        lr, beta, wd = float(group["lr"]), group["momentum"], group["weight_decay"]
        c, phi_bounds = group["trust_coefficient"], group["phi_bounds"]
        for p, buf in zip(params, self._buffers(params)):
            r = trust_ratio_value(norm(p), norm(p.grad), wd, c, phi_bounds) \
                if group["layer_ratio"] else 1.0
            lars_step_(p, buf, lr * r, beta, wd)
