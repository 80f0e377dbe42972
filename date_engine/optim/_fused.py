"""Per-layer optimizer steps through torch's fused kernels, one call per layer.

DATE, LARS and LAMB give every layer its own step size. torch's fused kernels (``_fused_sgd_``,
``_fused_adam_``, ``_fused_adamw_``, ``_fused_adagrad_``) update parameter, gradient and state in
one pass over memory but take one learning rate per call; calling them once per layer with that
layer's rate gives the per-layer step in that one pass, with no temporaries. Each layer's rate is
read as a Python number, which costs nothing when the tensors live on the host; on an accelerator
it would synchronise with the host and launch one kernel per layer, so there the multi-tensor
(``torch._foreach_*``) paths run instead: :func:`host_kernels` decides, and is the only place that
does.

How a layer's multiplier r enters each kernel, exactly (docs/performance.md, "One optimizer step"):

- Adam, AdamW, AdaGrad: their update is proportional to the learning rate and the rate enters no
  state, so scaling the update by r is the step at lr·r.
- RMSprop (no momentum, not centred): Adam's kernel with β1 = 0 (the first moment is the gradient)
  and a step count so large that both bias corrections are exactly 1 is RMSprop's update.
- SGD with momentum μ and dampening τ: DATE scales the gradient, d = r·(g + λw), before the
  momentum. The kernel's buffer update is μ·buf + (1 − dampening)·(g + λw), so dampening
  1 − (1 − τ)·r gives it exactly (1 − r on the first step, whose buffer starts at zero). Without
  momentum the step is lr·r·(g + λw). Nesterov's step adds d itself, unscaled by the kernel, so it
  takes the foreach path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from date_engine.optim._tensors import is_sharded

__all__ = ["FUSED_DTYPES", "FusedBase", "Kernel", "fused_base", "host_kernels", "kernel_exact",
           "lamb_direction_", "lars_step_", "norm"]

FUSED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
"""Parameter dtypes torch's fused CPU kernels take (each also passes :func:`kernel_exact`)."""

Kernel = Literal["sgd", "adam", "adamw", "adagrad"]
"""torch's fused kernels, by the name after ``torch._fused_``."""

_HAS_KERNELS = all(hasattr(torch, name) for name in
                   ("_fused_sgd_", "_fused_adam_", "_fused_adamw_", "_fused_adagrad_"))

# A step count at which 1 − β^t is exactly 1 for every β < 1 (β^t underflows to 0): Adam's kernel
# then applies no bias correction. A power of two, so float32 holds it exactly.
_NO_BIAS_CORRECTION = torch.tensor(float(2**62))


def host_kernels(tensors: Sequence[Tensor], kernel: Kernel) -> bool:
    """Whether torch's fused ``kernel`` serves these tensors, one call per layer: torch has it,
    every tensor is a dense, contiguous CPU tensor of a dtype it takes and computes right
    (:func:`kernel_exact`), and so is its gradient."""
    if not _HAS_KERNELS:
        return False
    for t in tensors:
        g = t.grad
        if is_sharded(t):  # a DTensor: its shard is stepped by the multi-tensor path
            return False
        if t.device.type != "cpu" or t.dtype not in FUSED_DTYPES or not t.is_contiguous():
            return False
        if g is not None and (g.is_sparse or g.dtype != t.dtype or not g.is_contiguous()):
            return False
    return all(kernel_exact(kernel, dtype) for dtype in {t.dtype for t in tensors})


@functools.cache
def kernel_exact(kernel: Kernel, dtype: torch.dtype) -> bool:
    """Whether torch's fused CPU ``kernel`` takes a step right on ``dtype`` tensors, checked once
    per process on 33 elements (a vectorised body and a tail for every SIMD width up to 32).

    From 1 with gradient 1 and lr 0.5, every kernel's first step lands exactly on 0.5 (SGD with
    and without momentum: w − lr·g; Adam and AdamW with β1 = β2 = ε = 0: w − lr·g/√g²; AdaGrad
    with ε = 0: the same). torch 2.13's CPU ``_fused_sgd_``
    fails this in float16 and bfloat16: it updates the momentum buffer but writes the parameter
    only in the scalar tail (docs/optimizer.md, "Every dtype"), so those dtypes take the
    multi-tensor path instead.
    """
    w, g = torch.ones(33, dtype=dtype), torch.ones(33, dtype=dtype)
    options = dict(weight_decay=0.0, maximize=False)
    if kernel == "sgd":
        ok = True
        for momentum in (0.0, 0.9):
            p, buf = w.clone(), torch.zeros_like(w)
            torch._fused_sgd_([p], [g], [buf] if momentum else [], lr=0.5, momentum=momentum,
                              dampening=0.0, nesterov=False, is_first_step=False, **options)
            ok = ok and bool((p == 0.5).all())
        return ok
    p, step = w.clone(), torch.zeros((), dtype=torch.float32)
    step += 1
    if kernel == "adagrad":
        torch._fused_adagrad_([p], [g], [torch.zeros_like(w)], [step], lr=0.5, lr_decay=0.0,
                              eps=0.0, **options)
    else:
        fused = torch._fused_adamw_ if kernel == "adamw" else torch._fused_adam_
        fused([p], [g], [torch.zeros_like(w)], [torch.zeros_like(w)], [], [step], lr=0.5,
              beta1=0.0, beta2=0.0, eps=0.0, amsgrad=False, **options)
    return bool((p == 0.5).all())


class FusedBase:
    """How one torch optimizer class takes a step at a per-layer rate through a fused kernel."""

    name = ""
    kernel: Kernel = "adam"
    """The torch kernel this step calls."""
    placement = "update"
    """Where DATE's ratio enters the step this kernel takes (catalog.Placement)."""

    def supports(self, group: dict[str, Any]) -> bool:
        """Whether this param group's options are ones the kernel computes exactly as the
        optimizer does."""
        return not group.get("differentiable") and not group.get("capturable")

    def step(self, group: dict[str, Any], params: list[Tensor], rates: list[float],
             state: Any, scratch: dict[Tensor, Tensor]) -> None:
        raise NotImplementedError


def _by_rate(params: list[Tensor], rates: list[float]) -> list[tuple[float, list[int]]]:
    """Indices of ``params`` by their rate: one kernel call per distinct rate (every layer left
    at r = 1 goes into one call)."""
    out: dict[float, list[int]] = {}
    for i, r in enumerate(rates):
        out.setdefault(r, []).append(i)
    return list(out.items())


class _Adam(FusedBase):
    """torch.optim.Adam and AdamW (decoupled weight decay: ``_fused_adamw_``)."""

    def __init__(self, decoupled: bool) -> None:
        self.decoupled = decoupled
        self.name = "AdamW" if decoupled else "Adam"
        self.kernel = "adamw" if decoupled else "adam"

    def supports(self, group: dict[str, Any]) -> bool:
        return super().supports(group) and not any(torch.is_tensor(b) for b in group["betas"])

    def step(self, group, params, rates, state, scratch) -> None:
        amsgrad = group["amsgrad"]
        for p in params:
            s = state[p]
            if not s:
                s["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                s["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                s["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if amsgrad:
                    s["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        steps = [state[p]["step"] for p in params]
        torch._foreach_add_(steps, 1)
        decoupled = group.get("decoupled_weight_decay", self.decoupled)
        kernel = torch._fused_adamw_ if decoupled else torch._fused_adam_
        beta1, beta2 = group["betas"]
        lr = float(group["lr"])
        for r, idx in _by_rate(params, rates):
            ps = [params[i] for i in idx]
            kernel(ps, [p.grad for p in ps], [state[p]["exp_avg"] for p in ps],
                   [state[p]["exp_avg_sq"] for p in ps],
                   [state[p]["max_exp_avg_sq"] for p in ps] if amsgrad else [],
                   [steps[i] for i in idx], lr=lr * r, beta1=beta1, beta2=beta2,
                   weight_decay=group["weight_decay"], eps=group["eps"], amsgrad=amsgrad,
                   maximize=group["maximize"])


class _Adagrad(FusedBase):
    name = "Adagrad"
    kernel = "adagrad"

    def step(self, group, params, rates, state, scratch) -> None:
        for p in params:
            s = state[p]
            if "sum" not in s:  # torch creates Adagrad's state in its constructor
                s["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                s["sum"] = torch.full_like(p, group["initial_accumulator_value"],
                                           memory_format=torch.preserve_format)
        steps = [state[p]["step"] for p in params]
        torch._foreach_add_(steps, 1)
        lr = float(group["lr"])
        for r, idx in _by_rate(params, rates):
            ps = [params[i] for i in idx]
            torch._fused_adagrad_(ps, [p.grad for p in ps], [state[p]["sum"] for p in ps],
                                  [steps[i] for i in idx], lr=lr * r,
                                  lr_decay=group["lr_decay"], weight_decay=group["weight_decay"],
                                  eps=group["eps"], maximize=group["maximize"])


class _RMSprop(FusedBase):
    name = "RMSprop"

    def supports(self, group: dict[str, Any]) -> bool:
        return super().supports(group) and group["momentum"] == 0 and not group["centered"]

    def step(self, group, params, rates, state, scratch) -> None:
        for p in params:
            s = state[p]
            if not s:
                s["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                s["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if p not in scratch:  # Adam's first moment, which β1 = 0 makes the gradient
                scratch[p] = torch.zeros_like(p)
        torch._foreach_add_([state[p]["step"] for p in params], 1)
        lr = float(group["lr"])
        for r, idx in _by_rate(params, rates):
            ps = [params[i] for i in idx]
            torch._fused_adam_(ps, [p.grad for p in ps], [scratch[p] for p in ps],
                               [state[p]["square_avg"] for p in ps], [],
                               [_NO_BIAS_CORRECTION] * len(ps), lr=lr * r, beta1=0.0,
                               beta2=group["alpha"], weight_decay=group["weight_decay"],
                               eps=group["eps"], amsgrad=False, maximize=group["maximize"])


class _SGD(FusedBase):
    """torch.optim.SGD without Nesterov; ``rates`` scale the gradient (DATE's gradient
    placement), not the step."""

    name = "SGD"
    kernel = "sgd"
    placement = "gradient"

    def supports(self, group: dict[str, Any]) -> bool:
        return super().supports(group) and not group["nesterov"]

    def step(self, group, params, rates, state, scratch) -> None:
        lr, mu, tau = float(group["lr"]), group["momentum"], group["dampening"]
        options = dict(weight_decay=group["weight_decay"], momentum=mu, nesterov=False,
                       maximize=group["maximize"], is_first_step=False)
        if mu == 0:
            for r, idx in _by_rate(params, rates):
                torch._fused_sgd_([params[i] for i in idx], [params[i].grad for i in idx], [],
                                  lr=lr * r, dampening=0.0, **options)
            return
        for p, r in zip(params, rates):
            s = state[p]
            first = s.get("momentum_buffer") is None
            if first:  # torch's first step sets buf = d; from zero, weight 1 − dampening = r·1
                s["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            weight = r if first else (1 - tau) * r
            torch._fused_sgd_([p], [p.grad], [s["momentum_buffer"]], lr=lr,
                              dampening=1 - weight, **options)


def fused_base(optimizer: torch.optim.Optimizer) -> FusedBase | None:
    """The fused per-layer step for ``optimizer``'s exact class (a subclass may step
    differently), or None."""
    return _BASES.get(type(optimizer))


_BASES: dict[type, FusedBase] = {
    torch.optim.Adam: _Adam(decoupled=False),
    torch.optim.AdamW: _Adam(decoupled=True),
    torch.optim.Adagrad: _Adagrad(),
    torch.optim.RMSprop: _RMSprop(),
    torch.optim.SGD: _SGD(),
}


def norm(t: Tensor) -> float:
    """||t|| as a Python float (one pass, no temporary)."""
    flat = t.view(-1)
    return math.sqrt(max(float(torch.dot(flat, flat)), 0.0))


def lars_step_(p: Tensor, buf: Tensor, step: float, momentum: float,
               weight_decay: float) -> None:
    """LARS's update of one layer, m ← β·m + step·(g + λw); w ← w − m, in SGD's kernel: its
    buffer update β·m + (1 − dampening)·(g + λw) with dampening 1 − step, then w − 1·m. Without
    momentum it is w − step·(g + λw) and m is not kept."""
    options = dict(weight_decay=weight_decay, nesterov=False, maximize=False,
                   is_first_step=False)
    if momentum == 0:
        torch._fused_sgd_([p], [p.grad], [], momentum=0.0, lr=step, dampening=0.0, **options)
    else:
        torch._fused_sgd_([p], [p.grad], [buf], momentum=momentum, lr=1.0,
                          dampening=1 - step, **options)


def lamb_direction_(p: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, t: Tensor, out: Tensor,
                    betas: tuple[float, float], eps: float, weight_decay: float) -> None:
    """LAMB's moments updated and its direction written to ``out`` as −u, with
    u = (m/b1)/(sqrt(v/b2) + ε) + λ·w (docs/algorithm.md §4).

    AdamW's kernel run on ``out`` with lr = 1 and weight decay 1 first multiplies ``out`` by
    1 − 1·1 = 0, then subtracts (m/b1)/(sqrt(v)/sqrt(b2) + ε): whatever ``out`` held, it ends as
    −(m/b1)/(sqrt(v/b2) + ε), and the moments are updated as Adam's. ``out`` must hold finite
    values (0·inf is not 0)."""
    torch._fused_adamw_([out], [p.grad], [exp_avg], [exp_avg_sq], [], [t], lr=1.0,
                        beta1=betas[0], beta2=betas[1], weight_decay=1.0, eps=eps,
                        amsgrad=False, maximize=False)
    if weight_decay != 0:
        out.add_(p, alpha=-weight_decay)
