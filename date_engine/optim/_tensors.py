"""Tensor-list helpers shared by the optimizers: grouping and norms, with no host synchronisation.

Device-specific choices of the optimizers live here and in
:func:`date_engine.optim._fused.host_kernels` (which tensors take the per-layer fused kernels),
nowhere else.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["LayerwiseOptimizer", "decay_add_", "group_by_device_and_dtype", "is_sharded", "like",
           "local", "norms", "scalars", "sharded_norms"]


def group_by_device_and_dtype(tensors: Sequence[Tensor]) -> dict[tuple, list[int]]:
    """Indices of ``tensors`` by (device, dtype): the unit a ``torch._foreach_*`` op takes."""
    buckets: dict[tuple, list[int]] = defaultdict(list)
    for i, t in enumerate(tensors):
        buckets[(t.device, t.dtype)].append(i)
    return buckets


def norms(tensors: Sequence[Tensor]) -> Tensor:
    """The L2 norm of each tensor (all on one device, one dtype), stacked into a 1-D tensor.

    On CUDA ``torch._foreach_norm`` is one fused multi-tensor kernel. On the CPU it runs a generic
    reduction per tensor, about 2× slower than a BLAS dot product on ResNet-50's shapes
    (benchmarks/cpu_kernels.py), so contiguous float32/float64 CPU tensors take the dot product.
    """
    if not tensors:
        return torch.empty(0)
    first = tensors[0]
    if first.device.type == "cpu" and first.dtype in (torch.float32, torch.float64):
        return torch.stack(
            [
                torch.dot(t.view(-1), t.view(-1))
                if t.is_contiguous()
                else torch.linalg.vector_norm(t).square()
                for t in tensors
            ]
        ).sqrt()
    return torch.stack(torch._foreach_norm(list(tensors)))


def is_sharded(t: Tensor) -> bool:
    """Whether ``t`` is a DTensor (a parameter or gradient of a model sharded with FSDP2's
    ``fully_shard``): each process holds a shard, and no process the whole layer."""
    return isinstance(t, _dtensor_class())


@functools.cache
def _dtensor_class() -> type:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed: nothing is sharded
        return type(None)
    return DTensor


def local(t: Tensor) -> Tensor:
    """The part of ``t`` this process holds: a DTensor's local shard (the same storage: writing
    it writes the DTensor), else ``t``."""
    return t.to_local() if is_sharded(t) else t


def sharded_norms(*lists: Sequence[Tensor]) -> list[Tensor]:
    """The whole-tensor L2 norms of DTensors from the shards each process holds: every tensor's
    local sum of squares, the lists stacked into one vector, one all-reduce (sum) for all of them
    (apex's DistributedFusedLAMB's pattern), then the square roots, one 1-D tensor per list.

    Every tensor lies on one device mesh of one dimension, sharded (``Shard``: the shards' sums
    add up to the whole) or replicated (``Replicate``: each process holds the whole, so its sum
    enters divided by the mesh's size). A gradient still ``Partial`` (not yet reduced) is refused.
    """
    from torch.distributed.tensor import Replicate, Shard

    flat = [t for ts in lists for t in ts]
    if not flat:
        return [torch.empty(0) for _ in lists]
    mesh = flat[0].device_mesh
    if mesh.ndim != 1:
        raise ValueError("DATE, LARS and LAMB take the per-layer norms of parameters sharded on a "
                         f"one-dimensional device mesh; this one has {mesh.ndim} dimensions.")
    shards = [t.to_local() for t in flat]
    squares = torch.empty(len(flat), dtype=torch.float64, device=shards[0].device)
    for idx in group_by_device_and_dtype(shards).values():
        squares[idx] = norms([shards[i] for i in idx]).to(squares).square()
    replicated = []
    for i, t in enumerate(flat):
        if t.device_mesh != mesh:
            raise ValueError("the parameters of one optimizer lie on different device meshes; "
                             "shard the whole model over one mesh.")
        placement = t.placements[0]
        if isinstance(placement, Replicate):
            replicated.append(i)
        elif not isinstance(placement, Shard):
            raise ValueError(f"a {placement} tensor has no norm yet: step the optimizer after "
                             "the gradients are reduced (FSDP2 does so in backward).")
    if replicated:
        squares[replicated] /= mesh.size()
    torch.distributed.all_reduce(squares, group=mesh.get_group())
    return list(squares.sqrt().split([len(ts) for ts in lists]))


def scalars(values: Tensor) -> list[Tensor]:
    """A 1-D tensor as a list of 0-dim tensors: per-tensor factors for ``_foreach_*`` ops."""
    return list(values.unbind(0))


def like(values: Tensor, t: Tensor) -> Tensor:
    """Per-tensor factors ready to multiply ``t``: on its device, float32 (float64 for float64)."""
    return values.to(t.device, torch.float64 if t.dtype == torch.float64 else torch.float32)


def decay_add_(
    bufs: Sequence[Tensor], tensors: Sequence[Tensor], beta: float, factors: Tensor
) -> None:
    """``bufs[i] = beta·bufs[i] + factors[i]·tensors[i]`` with a per-tensor factor (a 1-D tensor).

    On CUDA this is two multi-tensor kernels (mul_, addcmul_). On the CPU each pass over memory
    is what costs, and ``addr_`` (β·A + α·x⊗y, with y the 1-element factor) does it in one pass
    instead of two, about 1.4× faster on ResNet-50's shapes (benchmarks/cpu_kernels.py).
    """
    if not bufs:
        return
    if bufs[0].device.type == "cpu":
        if bufs[0].dtype not in (torch.float32, torch.float64):
            # float16/bfloat16 would round the factor itself (0.9 → 0.8984 in bfloat16); as a
            # Python number (free on the host) it enters in float32, as torch's own ops take it
            for b, t, f in zip(bufs, tensors, factors.tolist()):
                b.mul_(beta).add_(t, alpha=f)
            return
        for b, t, f in zip(bufs, tensors, factors.to(bufs[0].dtype).unbind(0)):
            if b.is_contiguous() and t.is_contiguous():
                b.view(-1, 1).addr_(t.reshape(-1), f.view(1), beta=beta)
            else:
                b.mul_(beta).add_(t * f)
        return
    if beta != 1:
        torch._foreach_mul_(list(bufs), beta)
    torch._foreach_addcmul_(list(bufs), list(tensors), scalars(factors))


class LayerwiseOptimizer(torch.optim.Optimizer):
    """What LARS and LAMB share: ``step`` evaluates the closure, then updates each param group's
    parameters that have a gradient, one (device, dtype) bucket at a time (``_update``)."""

    implementation: str | None = None
    """How the last step ran: ``"fused"`` (per-layer host kernels) or ``"foreach"``."""
    refused_dtypes: tuple[torch.dtype, ...] = ()
    """Parameter dtypes the optimizer's state cannot be kept in (and why, in ``_refused_why``)."""
    _refused_why = ""

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        name = type(self).__name__
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for p in params:
                if p.grad.is_sparse:
                    raise ValueError(f"{name} does not support sparse gradients; use a dense "
                                     "embedding (sparse=False) or an optimizer made for them.")
                if p.dtype in self.refused_dtypes:
                    raise ValueError(f"{name} cannot keep {p.dtype} parameters: "
                                     f"{self._refused_why}")
            for idx in group_by_device_and_dtype(params).values():
                self._update([params[i] for i in idx], group)
        return loss

    def _update(self, params: list[Tensor], group: dict) -> None:
        raise NotImplementedError
