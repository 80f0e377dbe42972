"""Per-layer learning-rate ratios: DATE's dynamic rule and the paper's static clamp
(docs/algorithm.md §3).

For each adapted layer l, ρ_l = ||w_l|| / ||g_l|| — the LARS ratio without its weight-decay term
(You et al., SC'19, §3.5). Where either norm is zero (or not finite) the layer keeps r_l = 1.

- ``dynamic``: r_l = clamp(ρ_l / m, 1/γ, γ), m the geometric mean of the step's ratios. The bounds
  m/γ and m·γ move with the run, and normalising by m keeps the overall step the schedule's lr(i).
- ``static``: r_l = clamp(c·ρ_l, lower, upper), Algorithm 1 with fixed bounds and trust coefficient
  c.
- ``off``: r_l = 1.

Everything is a handful of vector ops on the stacked norms: no host synchronisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from date_engine.catalog import LAYER_RATIO_DEFAULTS

__all__ = ["DEFAULTS", "RatioRule", "layer_ratios", "trust_ratio", "trust_ratio_value"]

Mode = Literal["dynamic", "static", "off"]


@dataclass(frozen=True)
class RatioRule:
    """How raw ratios ρ become the multipliers r applied to each layer's step."""

    mode: Mode = "dynamic"
    gamma: float = LAYER_RATIO_DEFAULTS["dynamic"]["gamma"]
    trust_coefficient: float = LAYER_RATIO_DEFAULTS["static"]["trust_coefficient"]
    lower: float = LAYER_RATIO_DEFAULTS["static"]["lower"]
    upper: float = LAYER_RATIO_DEFAULTS["static"]["upper"]

    def __post_init__(self) -> None:
        if self.mode not in ("dynamic", "static", "off"):
            raise ValueError(f"mode must be 'dynamic', 'static' or 'off', got {self.mode!r}")
        for name in ("gamma", "trust_coefficient", "lower", "upper"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if self.gamma < 1:
            raise ValueError(f"gamma must be >= 1, got {self.gamma}")
        if self.trust_coefficient <= 0:
            raise ValueError(f"trust_coefficient must be > 0, got {self.trust_coefficient}")
        if not 0 <= self.lower <= self.upper:
            raise ValueError(
                f"need 0 <= lower <= upper, got lower={self.lower}, upper={self.upper}"
            )


DEFAULTS = RatioRule()
"""Every rule option at its catalog default (:data:`date_engine.catalog.LAYER_RATIO_DEFAULTS`)."""


def trust_ratio(
    w_norms: Tensor,
    g_norms: Tensor,
    weight_decay: float = 0.0,
    trust_coefficient: float = 1.0,
    phi_bounds: tuple[float, float] | None = None,
) -> Tensor:
    """c·φ(||w||) / (||g|| + λ·||w||) per entry, and 1 where either norm is 0 or not finite.

    With the defaults this is DATE's ρ = ||w||/||g||; LARS passes its λ and c, LAMB the norms of
    its update as ``g_norms``. φ is the identity, or a clamp to ``phi_bounds``.
    """
    w, g = _accurate(w_norms), _accurate(g_norms)
    valid = _valid(w, g)
    phi = w.clamp(*phi_bounds) if phi_bounds is not None else w
    denominator = torch.where(valid, g + weight_decay * w, torch.ones_like(g))
    return torch.where(valid, trust_coefficient * phi / denominator, torch.ones_like(w))


def trust_ratio_value(
    w_norm: float,
    g_norm: float,
    weight_decay: float = 0.0,
    trust_coefficient: float = 1.0,
    phi_bounds: tuple[float, float] | None = None,
) -> float:
    """:func:`trust_ratio` of one layer, in Python floats: for the per-layer host kernels, which
    take each layer's step as a number once its norms are known."""
    if not (w_norm > 0 and g_norm > 0 and math.isfinite(w_norm) and math.isfinite(g_norm)):
        return 1.0
    phi = min(max(w_norm, phi_bounds[0]), phi_bounds[1]) if phi_bounds is not None else w_norm
    return trust_coefficient * phi / (g_norm + weight_decay * w_norm)


def layer_ratios(w_norms: Tensor, g_norms: Tensor, rule: RatioRule) -> Tensor:
    """Multipliers r_l for stacked weight and gradient norms (1-D, one entry per adapted layer)."""
    rho = trust_ratio(w_norms, g_norms)
    if rule.mode == "off":
        return torch.ones_like(rho)
    valid = _valid(_accurate(w_norms), _accurate(g_norms))
    if rule.mode == "static":
        r = (rule.trust_coefficient * rho).clamp(rule.lower, rule.upper)
    else:
        log_rho = torch.where(valid, rho.log(), torch.zeros_like(rho))
        mean_log = log_rho.sum() / valid.sum().clamp_min(1).to(rho.dtype)
        r = (rho * torch.exp(-mean_log)).clamp(1.0 / rule.gamma, rule.gamma)
    return torch.where(valid, r, torch.ones_like(r))


def _accurate(norms: Tensor) -> Tensor:
    return norms.to(torch.promote_types(norms.dtype, torch.float32))


def _valid(w: Tensor, g: Tensor) -> Tensor:
    return (w > 0) & (g > 0) & torch.isfinite(w) & torch.isfinite(g)
