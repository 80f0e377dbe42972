"""LAMB (You et al., 2019), as docs/algorithm.md §4 states it, for comparisons.

Per parameter tensor, at step t, with Adam's moments and bias corrections b1 = 1 − β1^t, b2 = 1 −
β2^t:

    m ← β1·m + (1 − β1)·g        v ← β2·v + (1 − β2)·g²
    u = (m/b1) / (sqrt(v/b2) + ε) + λ·w
    r = φ(||w||) / ||u||          (r = 1 if a norm is 0)
    w ← w − η·r·u

A param group with ``layer_ratio=False`` keeps r = 1 (Adam with L2 folded into the update).

On the CPU each layer is done before the next, so its later passes find it in cache: torch's fused
AdamW kernel updates the moments and writes −u into one scratch buffer the size of the largest
layer, shared by all (:func:`date_engine.optim._fused.lamb_direction_`; reused layer after layer
it stays in cache, and LAMB keeps no update buffer per parameter), then the two norms, then
w ← w − η·r·u (docs/performance.md).
Elsewhere the same runs as multi-tensor passes with no host synchronisation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from date_engine.optim._fused import host_kernels, lamb_direction_, norm
from date_engine.optim._tensors import (
    LayerwiseOptimizer,
    is_sharded,
    like,
    local,
    norms,
    scalars,
    sharded_norms,
)
from date_engine.optim.ratios import trust_ratio, trust_ratio_value

__all__ = ["LAMB"]


class LAMB(LayerwiseOptimizer):
    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        phi_bounds: tuple[float, float] | None = None,
        fused: bool | None = None,
    ) -> None:
        if lr <= 0 or eps <= 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(
                f"invalid LAMB settings: lr={lr}, betas={betas}, eps={eps}, "
                f"weight_decay={weight_decay}"
            )
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        phi_bounds=phi_bounds, layer_ratio=True)
        super().__init__(params, defaults)
        self.fused = fused is not False
        """Take the fused per-layer host path where it serves (``fused=False``: never)."""
        self._u: dict[Tensor, Tensor] = {}  # the update u, one buffer per parameter, reused
        self._scratch: dict[torch.dtype, Tensor] = {}  # the host path's u, one a dtype

    refused_dtypes = (torch.float16,)
    _refused_why = ("its second moment, kept in the parameters' dtype, underflows in float16 "
                    "(g² < 6e-8) and turns the update's direction; keep float32 parameters (train "
                    "in reduced precision with torch.autocast).")

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._u, self._scratch = {}, {}

    def _buffer(self, p: Tensor) -> Tensor:
        if p not in self._u:  # zeros: the host path needs finite values in it (lamb_direction_)
            self._u[p] = torch.zeros_like(_real(p))
        return self._u[p]

    def _update(self, params: list[Tensor], group: dict[str, Any]) -> None:
        for p in params:
            state = self.state[p]
            if not state:  # complex parameters: real and imaginary parts as two reals, as Adam does
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(_real(p))
                state["exp_avg_sq"] = torch.zeros_like(_real(p))
            state["step"] += 1
        # one foreach pass per step count: the bias corrections are plain floats
        by_step: dict[int, list[Tensor]] = {}
        for p in params:
            by_step.setdefault(self.state[p]["step"], []).append(p)
        host = self.fused and host_kernels(params, "adamw")
        self.implementation = "fused" if host else "foreach"
        for t, ps in by_step.items():
            (self._update_host if host else self._update_at)(ps, group, t)

    def _shared(self, p: Tensor) -> Tensor:
        """A view of the shape of ``p`` into the scratch of its dtype, grown to the largest layer
        seen (zeros: the kernel needs finite values in it, :func:`lamb_direction_`)."""
        scratch = self._scratch.get(p.dtype)
        if scratch is None or scratch.numel() < p.numel():
            scratch = self._scratch[p.dtype] = torch.zeros(p.numel(), dtype=p.dtype)
        return scratch[:p.numel()].view(p.shape)

    def _update_host(self, params: list[Tensor], group: dict[str, Any], t: int) -> None:
        step = torch.tensor(float(t))  # the fused kernel reads the step count from a tensor
        lr, betas, eps, wd = float(group["lr"]), group["betas"], group["eps"], group["weight_decay"]
        for p in params:
            state, u = self.state[p], self._shared(p)
            lamb_direction_(p, state["exp_avg"], state["exp_avg_sq"], step, u, betas, eps, wd)
            u_norm = norm(u)
            r = trust_ratio_value(norm(p), u_norm, phi_bounds=group["phi_bounds"]) \
                if group["layer_ratio"] else 1.0
            p.add_(u, alpha=lr * r)  # u holds −u
            if not math.isfinite(u_norm):  # the next layer's kernel must find finite values
                u.zero_()

    def _update_at(self, params: list[Tensor], group: dict[str, Any], t: int) -> None:
        (beta1, beta2), eps, wd, lr = (
            group["betas"],
            group["eps"],
            group["weight_decay"],
            group["lr"],
        )
        owners, buffers = params, [self._buffer(p) for p in params]  # reused: no allocation
        # a DTensor's shard (FSDP2), else the tensor: the passes below are elementwise
        m = [local(self.state[p]["exp_avg"]) for p in params]
        v = [local(self.state[p]["exp_avg_sq"]) for p in params]
        u = [local(b) for b in buffers]
        grads = [_real(local(p.grad)) for p in params]
        params = [_real(local(p)) for p in params]
        torch._foreach_lerp_(m, grads, 1 - beta1)
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
        # u = (m/b1)/(sqrt(v/b2) + ε) = c·m/(sqrt(v) + ε·sqrt(b2)) with c = sqrt(b2)/b1, so the
        # passes work on u' = u/c and c is folded into the final scale.
        sqrt_b2 = math.sqrt(1 - beta2**t)
        c = sqrt_b2 / (1 - beta1**t)
        torch._foreach_copy_(u, v)
        torch._foreach_sqrt_(u)
        torch._foreach_add_(u, eps * sqrt_b2)
        torch._foreach_div_(u, m)  # u = denominator / m, so its reciprocal is m / denominator
        torch._foreach_reciprocal_(u)
        if wd != 0:
            torch._foreach_add_(u, params, alpha=wd / c)
        if group["layer_ratio"]:
            w, n = sharded_norms(owners, buffers) if is_sharded(owners[0]) else \
                (norms(params), norms(u))
            r = trust_ratio(w, n * c, phi_bounds=group["phi_bounds"])
        else:
            r = torch.ones(len(params), device=params[0].device)
        scale = (-lr * c) * like(r, params[0])
        torch._foreach_addcmul_(params, u, scalars(scale))


def _real(t: Tensor) -> Tensor:
    """A complex tensor as real pairs (a view: writing it writes ``t``); a real one as it is."""
    return torch.view_as_real(t) if t.is_complex() else t
