"""Straightforward per-parameter implementations of LARS and LAMB (docs/algorithm.md §4).

One Python loop over parameters, one tensor op per formula term, Python floats for the ratios —
the way these optimizers are usually first written. They are the references the tests check
:class:`~date_engine.optim.LARS` and :class:`~date_engine.optim.LAMB` against (in float64) and the
baselines ``benchmarks/optimizer_step.py`` times them against. Use the foreach versions to train.
"""

from __future__ import annotations

import torch
from torch.optim import Optimizer

__all__ = ["ReferenceLAMB", "ReferenceLARS"]


class ReferenceLARS(Optimizer):
    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, trust_coefficient=1.0,
                 phi_bounds=None):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      trust_coefficient=trust_coefficient, phi_bounds=phi_bounds))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, beta, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                w_norm, g_norm = p.norm().item(), p.grad.norm().item()
                if w_norm > 0 and g_norm > 0:
                    phi = _clip(w_norm, group["phi_bounds"])
                    ratio = group["trust_coefficient"] * phi / (g_norm + wd * w_norm)
                else:
                    ratio = 1.0
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                buf = state["momentum_buffer"]
                buf.mul_(beta).add_(p.grad.add(p, alpha=wd), alpha=lr * ratio)
                p.sub_(buf)


class ReferenceLAMB(Optimizer):
    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, phi_bounds=None):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      phi_bounds=phi_bounds))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            (beta1, beta2), eps, wd = group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(
                        step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p)
                    )
                state["step"] += 1
                t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                m_hat = m / (1 - beta1**t)
                v_hat = v / (1 - beta2**t)
                update = m_hat / (v_hat.sqrt() + eps)
                update.add_(p, alpha=wd)
                w_norm, u_norm = p.norm().item(), update.norm().item()
                ratio = (
                    _clip(w_norm, group["phi_bounds"]) / u_norm
                    if w_norm > 0 and u_norm > 0
                    else 1.0
                )
                p.sub_(update, alpha=group["lr"] * ratio)


def _clip(value: float, bounds):
    return value if bounds is None else min(max(value, bounds[0]), bounds[1])
