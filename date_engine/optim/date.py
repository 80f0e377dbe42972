"""DATE: clamped per-layer learning-rate ratios over any torch optimizer (You et al., SC'19, §3.5).

``DATE(base)`` wraps the optimizer the baseline already uses. Each step it measures, per adapted
layer, ρ_l = ||w_l|| / ||g_l|| on the final (all-reduced, unscaled) gradients, turns the ratios into
multipliers r_l (:mod:`date_engine.optim.ratios`) and takes the base optimizer's step for layer l
at learning rate lr·r_l:

- SGD-family bases (SGD, momentum, Nesterov): r_l scales the layer's gradient, its L2 weight-decay
  term included, before the momentum update — the LARS placement.
- Adaptive bases (AdaGrad, RMSprop, Adam, AdamW, ...): a scaled gradient would cancel inside their
  normalisation, so r_l scales the base's *update*: w ← w_before + r_l·(w_after − w_before).

How the step runs (:attr:`DATE.implementation`), fastest first:

- ``"fused"``: torch's fused kernel of the base, one call per layer at that layer's rate
  (:mod:`date_engine.optim._fused`): one pass over memory besides the two norm reductions, no
  temporaries. For ``torch.optim`` SGD (not Nesterov), Adam, AdamW, AdaGrad and RMSprop (no
  momentum, not centred) on the CPU, whatever their own ``foreach``/``fused`` flags.
- ``"foreach"``: multi-tensor passes with no host synchronisation — the choice on accelerators.
  SGD's update is run by DATE itself with r_l folded into the same passes; any other base takes
  its own step between a copy of the parameters and a lerp back, which needs one buffer the size
  of the adapted parameters.
- ``"loop"``: the same, one tensor at a time (``foreach=False``).

``param_groups`` and ``state`` are the base's own objects, so LR schedulers, ``GradScaler`` and
checkpoints work on a DATE optimizer as on the base — also after ``load_state_dict``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from date_engine.catalog import CATALOG, Placement
from date_engine.optim._fused import FusedBase, fused_base, host_kernels
from date_engine.optim._tensors import (
    decay_add_,
    group_by_device_and_dtype,
    is_sharded,
    like,
    local,
    norms,
    scalars,
    sharded_norms,
)
from date_engine.optim.ratios import DEFAULTS, Mode, RatioRule, layer_ratios

__all__ = ["DATE"]

Exclude = Callable[[str, Tensor], bool]


class DATE(Optimizer):
    """Per-layer stabilised learning over ``base`` (docs/algorithm.md §3).

    Args:
        base: the baseline's optimizer, built over the model's parameters — from
            ``model.named_parameters()`` if ``exclude`` should see parameter names.
        mode: ``"dynamic"`` (default), ``"static"`` or ``"off"`` (exactly ``base``).
        gamma: dynamic: how far a layer's ratio may stray from the geometric mean.
        lower, upper, trust_coefficient: static: r = clamp(trust_coefficient·ρ, lower, upper).
        exclude: ``exclude(name, param) -> True`` keeps a parameter at r = 1. Tensors with
            ``ndim <= 1`` (biases, norm scales) and param groups with ``layer_ratio=False`` are
            always kept at 1.
        placement: where r enters, ``"gradient"`` or ``"update"``; inferred from ``base``'s class,
            required for optimizers this module does not know.
        foreach: where the fused kernels do not serve, use ``torch._foreach_*`` ops (default) or
            a per-tensor loop (``False``).
        fused: take the fused per-layer step where it serves (``None``, the default), or never
            (``False``).

    After each step, :attr:`last_ratios` holds the adapted layers' multipliers as a device tensor;
    reading it (for logging) is the only host synchronisation.
    """

    def __init__(
        self,
        base: Optimizer,
        mode: Mode = "dynamic",
        gamma: float = DEFAULTS.gamma,
        lower: float = DEFAULTS.lower,
        upper: float = DEFAULTS.upper,
        trust_coefficient: float = DEFAULTS.trust_coefficient,
        exclude: Exclude | None = None,
        placement: Placement | None = None,
        foreach: bool | None = None,
        fused: bool | None = None,
    ) -> None:
        if not isinstance(base, Optimizer) or isinstance(base, DATE):
            raise TypeError(f"DATE wraps a torch optimizer, got {type(base).__name__}")
        # Mirror Optimizer.__init__ without letting it create state or param groups of its own:
        # both are properties reading through to the base.
        self._optimizer_step_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_step_post_hooks: OrderedDict = OrderedDict()
        self._optimizer_state_dict_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_state_dict_post_hooks: OrderedDict = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_load_state_dict_post_hooks: OrderedDict = OrderedDict()
        self._patch_step_function()

        self.base = base
        self.rule = RatioRule(mode, gamma, trust_coefficient, lower, upper)
        if exclude is not None and not any(g.get("param_names") for g in base.param_groups):
            raise ValueError("exclude= decides by parameter name, but the base optimizer was "
                             "built without names (every name would be ''); build it from "
                             "model.named_parameters().")
        self.exclude = exclude
        if placement not in (None, "gradient", "update"):
            raise ValueError(f"placement must be 'gradient' or 'update', got {placement!r}")
        _refuse_unwrappable(base, placement)
        self.placement: Placement = placement or _placement_of(base)
        self.foreach = True if foreach is None else foreach
        kernel = None if fused is False else fused_base(base)
        self._fused: FusedBase | None = \
            kernel if kernel is not None and kernel.placement == self.placement else None
        self.steps = 0
        """Optimizer steps taken through this wrapper (skipped GradScaler steps do not count)."""
        self.last_ratios: Tensor | None = None
        """r_l of the adapted layers at the last step, in parameter order (None before a step)."""
        self._scratch: dict[Tensor, Tensor] = {}  # per-parameter buffers, allocated once
        self.implementation = "off" if self.rule.mode == "off" else None
        """How the last step ran: ``"fused"``, ``"foreach"``, ``"loop"`` (None before a step),
        or ``"off"`` (the base's own step)."""
        if isinstance(base, torch.optim.SGD):
            for group in base.param_groups:
                if group.get("differentiable"):
                    raise ValueError("DATE does not support SGD with differentiable=True")

    # ------------------------------------------------------------- the base's objects, shared

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.base.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.base.param_groups = value

    @property
    def state(self):  # type: ignore[override]
        return self.base.state

    @state.setter
    def state(self, value) -> None:
        self.base.state = value

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.base.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.base.defaults = value

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_scratch"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._scratch = {}
        self._patch_step_function()

    def __repr__(self) -> str:
        rule = self.rule
        opts = {
            "dynamic": f"gamma={rule.gamma:g}",
            "static": f"trust_coefficient={rule.trust_coefficient:g}, lower={rule.lower:g}, "
            f"upper={rule.upper:g}",
            "off": "",
        }[rule.mode]
        return f"DATE(mode={rule.mode}{', ' + opts if opts else ''}, base={self.base!r})"

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.base.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.base.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        """The base's state dict plus a ``"date"`` entry with this wrapper's own state (and the
        base's class, which :meth:`load_state_dict` checks)."""
        out = self.base.state_dict()
        out["date"] = {"steps": self.steps, "last_ratios": self.last_ratios,
                       "base": type(self.base).__name__}
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:  # type: ignore[override]
        """Load a DATE state dict, or a plain state dict of the base optimizer. One of another
        optimizer is refused with a ValueError, and this optimizer is left as it was."""
        own = state_dict.get("date") or {}
        saved_base, mine = own.get("base"), type(self.base).__name__
        if saved_base is not None and saved_base != mine:
            raise ValueError(f"this state dict is DATE over {saved_base}'s; this DATE wraps "
                             f"{mine}: load it into DATE over {saved_base}.")
        before = self.base.state_dict()
        self.base.load_state_dict({k: v for k, v in state_dict.items() if k != "date"})
        lacking = sorted({k for g in self.param_groups for k in self.defaults if k not in g})
        if lacking:  # torch loads any optimizer's groups; this base would fail at its step
            self.base.load_state_dict(before)
            raise ValueError(f"this state dict is of another optimizer than {mine} (its param "
                             f"groups lack {', '.join(lacking)}); load one saved from {mine}.")
        self.steps = int(own.get("steps", 0))
        self.last_ratios = own.get("last_ratios")
        self._scratch.clear()

    # ------------------------------------------------------------------------- the step

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.rule.mode == "off":
            self.base.step()
            self.steps += 1
            return loss

        entries = self._entries()
        adapted, spans = bucketed([p for p, _, keep in entries if keep])
        ratios = self._ratios(adapted, spans)
        kernel = self._fused_kernel(entries)
        self.implementation = "fused" if kernel else "foreach" if self.foreach else "loop"
        if kernel is not None:
            self._step_fused(kernel, entries, adapted, ratios)
        elif self.placement == "update":
            self._step_scaling_update(adapted, spans, ratios)
        elif isinstance(self.base, torch.optim.SGD):
            self._step_sgd(entries, adapted, ratios)
        else:
            self._step_scaling_gradient(adapted, spans, ratios)
        self.last_ratios = ratios
        self.steps += 1
        return loss

    def _entries(self) -> list[tuple[Tensor, dict[str, Any], bool]]:
        """(parameter, its group, adapted?) for every parameter that has a gradient."""
        out = []
        for group in self.param_groups:
            names = group.get("param_names")
            adapt_group = group.get("layer_ratio", True)
            for i, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise ValueError("DATE does not support sparse gradients")
                keep = adapt_group and p.ndim > 1
                if keep and self.exclude is not None:
                    keep = not self.exclude(names[i] if names else "", p)
                out.append((p, group, keep))
        return out

    def _ratios(self, adapted: list[Tensor], spans: list[slice]) -> Tensor:
        """r_l of the adapted parameters, in their (bucket) order, on the first one's device."""
        if not adapted:
            return torch.empty(0)
        home = adapted[0].device
        acc = torch.float64 if any(p.dtype == torch.float64 for p in adapted) else torch.float32
        if is_sharded(adapted[0]):  # FSDP2: each process holds shards; one all-reduce for all
            w, g = sharded_norms(adapted, [p.grad for p in adapted])
            return layer_ratios(w.to(home, acc), g.to(home, acc), self.rule)
        if self.foreach:
            w = torch.cat([norms(adapted[s]).to(home, acc) for s in spans])
            g = torch.cat([norms([p.grad for p in adapted[s]]).to(home, acc) for s in spans])
        else:
            w = torch.cat([norms([p]).to(home, acc) for p in adapted])
            g = torch.cat([norms([p.grad]).to(home, acc) for p in adapted])
        return layer_ratios(w, g, self.rule)

    def _fused_kernel(self, entries) -> FusedBase | None:
        """The base's fused per-layer step, if it serves every parameter and group this step."""
        kernel = self._fused
        if kernel is None or not host_kernels([p for p, _, _ in entries], kernel.kernel):
            return None
        groups = {id(g): g for _, g, _ in entries}.values()
        return kernel if all(kernel.supports(g) for g in groups) else None

    def _step_fused(self, kernel: FusedBase, entries, adapted: list[Tensor],
                    ratios: Tensor) -> None:
        rate = dict(zip(adapted, ratios.tolist()))  # host numbers: free where the tensors live
        for group in self.param_groups:
            params = [p for p, g, _ in entries if g is group]
            if params:
                kernel.step(group, params, [rate.get(p, 1.0) for p in params], self.state,
                            self._scratch)

    # Adaptive bases: scale the base's update.
    def _step_scaling_update(
        self, adapted: list[Tensor], spans: list[slice], ratios: Tensor
    ) -> None:
        shards = [local(p) for p in adapted]  # a DTensor's own shard; elementwise from here
        before = [self._buffer(p) for p in shards]
        if self.foreach:
            for s in spans:
                torch._foreach_copy_(before[s], shards[s])
        else:
            for b, p in zip(before, shards):
                b.copy_(p)
        self.base.step()
        # w = w_before + r·(w_after − w_before) = lerp(w_after, w_before, 1 − r)
        keep = 1 - ratios
        if self.foreach:
            for s in spans:
                torch._foreach_lerp_(shards[s], before[s], scalars(like(keep[s], shards[s][0])))
        else:
            for p, b, k in zip(shards, before, keep.unbind(0)):
                p.lerp_(b, like(k, p))

    def _buffer(self, p: Tensor) -> Tensor:
        buf = self._scratch.get(p)
        if buf is None or buf.shape != p.shape:
            buf = self._scratch[p] = torch.empty_like(p)
        return buf

    # Any other gradient-placement base: scale the gradients, then its own step.
    def _step_scaling_gradient(
        self, adapted: list[Tensor], spans: list[slice], ratios: Tensor
    ) -> None:
        if self.foreach:
            for s in spans:
                grads = [p.grad for p in adapted[s]]
                torch._foreach_mul_(grads, scalars(like(ratios[s], grads[0])))
        else:
            for p, r in zip(adapted, ratios.unbind(0)):
                p.grad.mul_(like(r, p.grad))
        self.base.step()

    # torch.optim.SGD: its own update, with r_l folded into the same passes.
    def _step_sgd(self, entries, adapted: list[Tensor], ratios: Tensor) -> None:
        position = {p: i for i, p in enumerate(adapted)}
        per_layer = ratios.unbind(0)
        for group in self.param_groups:
            ordered, spans = bucketed([p for p, g, _ in entries if g is group])
            for s in spans:
                ps = ordered[s]
                one = ratios.new_ones(()) if len(ratios) else torch.ones((), device=ps[0].device)
                r = torch.stack([per_layer[position[p]] if p in position else one for p in ps])
                _sgd_update(_Shards(ps, self.state), like(r, local(ps[0])), group, self.foreach)


class _Shards:
    """The tensors SGD's update reads and writes, for ``params``: the parameters, their
    gradients and momentum buffers as plain tensors — a DTensor's local shard (the update is
    elementwise, so each process steps its shard), else the tensor itself. A new buffer is kept
    in the optimizer's state as the parameter is (a DTensor for a DTensor, so a sharded
    checkpoint holds it)."""

    def __init__(self, params: list[Tensor], state) -> None:
        self.owners, self.state = params, state
        self.params = [local(p) for p in params]
        self.grads = [local(p.grad) for p in params]
        self.bufs = [None if b is None else local(b)
                     for b in (state[p].get("momentum_buffer") for p in params)]

    def new_buffer(self, i: int, value: Tensor) -> Tensor:
        """Keep ``value`` (the first step's d) as parameter i's momentum buffer."""
        p = self.owners[i]
        if is_sharded(p):
            buf = self.state[p]["momentum_buffer"] = torch.zeros_like(p)
            self.bufs[i] = local(buf).copy_(value)
        else:
            self.bufs[i] = self.state[p]["momentum_buffer"] = value.detach().clone()
        return self.bufs[i]


def _sgd_update(shards: _Shards, r: Tensor, group: dict[str, Any], foreach: bool) -> None:
    """torch.optim.SGD's update (same buffers, same state) with each layer's step at lr·r_l.

    With d = r·(g + λw):  buf = μ·buf + (1 − τ)·d  (buf = d on the first step),
    w -= lr·(d + μ·buf) with Nesterov, else w -= lr·buf; or w -= lr·d without momentum.
    """
    lr, mu, tau = float(group["lr"]), group["momentum"], group["dampening"]
    wd, nesterov, maximize = group["weight_decay"], group["nesterov"], group["maximize"]
    params, grads, bufs = shards.params, shards.grads, shards.bufs
    if foreach:
        if maximize:
            grads = torch._foreach_neg(grads)
        if wd != 0:
            grads = torch._foreach_add(grads, params, alpha=wd)
        if mu == 0:
            torch._foreach_addcmul_(params, grads, scalars(-lr * r))
            return
        if all(b is not None for b in bufs):
            decay_add_(bufs, grads, mu, (1 - tau) * r)
        else:
            for i, (g, rr) in enumerate(zip(grads, r.unbind(0))):
                if bufs[i] is None:
                    shards.new_buffer(i, g * rr)
                else:
                    bufs[i].mul_(mu).add_(g * ((1 - tau) * rr))
        if nesterov:  # w -= lr·(d + μ·buf), d formed first as torch does: one rounding of w
            d = torch._foreach_mul(grads, scalars(r))
            torch._foreach_add_(d, bufs, alpha=mu)
            torch._foreach_add_(params, d, alpha=-lr)
        else:
            torch._foreach_add_(params, bufs, alpha=-lr)
        return
    for i, (p, g, rr) in enumerate(zip(params, grads, r.unbind(0))):
        d = -g if maximize else g
        if wd != 0:
            d = d.add(p, alpha=wd)
        d = d * rr
        if mu != 0:
            buf = bufs[i]
            if buf is None:
                buf = shards.new_buffer(i, d)
            else:
                buf.mul_(mu).add_(d, alpha=1 - tau)
            d = d.add(buf, alpha=mu) if nesterov else buf
        p.add_(d, alpha=-lr)


def bucketed(tensors: list[Tensor]) -> tuple[list[Tensor], list[slice]]:
    """``tensors`` reordered so that each (device, dtype) bucket is contiguous; the slices."""
    ordered: list[Tensor] = []
    spans: list[slice] = []
    for idx in group_by_device_and_dtype(tensors).values():
        spans.append(slice(len(ordered), len(ordered) + len(idx)))
        ordered += [tensors[i] for i in idx]
    return ordered, spans


def _refuse_unwrappable(base: Optimizer, placement: Placement | None) -> None:
    """Bases whose step DATE cannot scale per layer, refused with the reason."""
    if isinstance(base, torch.optim.LBFGS):
        raise ValueError("DATE cannot wrap LBFGS: it re-evaluates the closure inside its own step, "
                         "where no per-layer ratio can be applied; use LBFGS unwrapped.")
    if isinstance(base, torch.optim.Rprop) and placement == "gradient":
        raise ValueError("Rprop steps by the sign of the gradient, so scaling the gradient would "
                         "change nothing; use placement='update' (the default for Rprop).")


def _placement_of(base: Optimizer) -> Placement:
    """Where the ratio enters ``base``'s step, from the catalog record of its class (or a base
    class of it)."""
    for cls in type(base).__mro__:
        for record in CATALOG.values():
            if record.placement is not None and record.load_class() is cls:
                return record.placement
    raise ValueError(
        f"DATE does not know where the ratio enters {type(base).__name__}; pass "
        "placement='gradient' (SGD-like: the ratio scales the gradient) or placement='update' "
        "(adaptive: the ratio scales the optimizer's update)."
    )
