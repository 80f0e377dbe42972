"""A torchrun worker for tests/test_sharded.py: each optimizer steps a model sharded with FSDP2's
``fully_shard`` (2 processes, gloo, uneven shards) and the same model unsharded on the whole batch
in every process; prints one JSON line per optimizer from rank 0."""

from __future__ import annotations

import json

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from date_engine.optim import DATE, LAMB, LARS
from date_engine.optim._tensors import sharded_norms

STEPS = 100
OPTIMIZERS = {
    "date-sgd": lambda ps: DATE(torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-4)),
    "date-nesterov-loop": lambda ps: DATE(torch.optim.SGD(ps, lr=0.05, momentum=0.9,
                                                          nesterov=True), foreach=False),
    "date-adam": lambda ps: DATE(torch.optim.Adam(ps, lr=1e-2)),
    "lars": lambda ps: LARS(ps, lr=0.005, momentum=0.9, weight_decay=1e-4),  # 0.05: chaotic
    "lamb": lambda ps: LAMB(ps, lr=1e-2, weight_decay=0.01),
}


def model() -> torch.nn.Module:
    torch.manual_seed(0)  # every process builds the same model: FSDP2 broadcasts no weights
    return torch.nn.Sequential(torch.nn.Linear(10, 7), torch.nn.Tanh(), torch.nn.Linear(7, 5),
                               torch.nn.Tanh(), torch.nn.Linear(5, 3))


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    collectives = []
    reduce = dist.all_reduce

    def counted(*args, **kwargs):
        collectives.append(1)
        return reduce(*args, **kwargs)

    for name, build in OPTIMIZERS.items():
        whole, sharded = model(), model()
        for layer in sharded:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)  # 7 and 5 rows over 2 processes: uneven shards
        fully_shard(sharded)
        a, b = build(whole.parameters()), build(sharded.parameters())
        data = torch.Generator().manual_seed(1)
        per_step, ratios_differ = set(), 0.0
        for _ in range(STEPS):
            x, y = torch.randn(8, 10, generator=data), torch.randn(8, 3, generator=data)
            a.zero_grad()
            torch.nn.functional.mse_loss(whole(x), y).backward()
            a.step()
            mine = slice(rank * 8 // world, (rank + 1) * 8 // world)
            b.zero_grad()
            torch.nn.functional.mse_loss(sharded(x[mine]), y[mine]).backward()
            collectives.clear()
            dist.all_reduce = counted
            try:
                b.step()
            finally:
                dist.all_reduce = reduce
            per_step.add(len(collectives))
            if hasattr(a, "last_ratios"):
                ratios_differ = max(ratios_differ, float(
                    ((a.last_ratios - b.last_ratios).abs() / a.last_ratios.abs()).max()))
        worst = max(float((p.detach() - q.full_tensor()).abs().max() / p.detach().abs().max())
                    for p, q in zip(whole.parameters(), sharded.parameters()))
        if rank == 0:
            print(json.dumps({"optimizer": name, "weights": worst, "ratios": ratios_differ,
                              "all_reduces_per_step": sorted(per_step),
                              "implementation": b.implementation}), flush=True)
    # a replicated tensor beside a sharded one: each enters once, whatever the processes hold
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = next(sharded.parameters()).device_mesh
    whole = torch.arange(15.0).reshape(5, 3)
    norms = sharded_norms([distribute_tensor(whole, mesh, [Shard(0)]),
                           distribute_tensor(whole, mesh, [Replicate()])])[0]
    if rank == 0:
        print(json.dumps({"optimizer": "norms: sharded, replicated",
                          "norms": norms.tolist(), "whole": float(whole.norm())}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
