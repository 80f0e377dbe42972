"""A torchrun worker for tests/test_inrun_probe.py: the in-run probe under DDP on 2 processes.

Each process trains a DDP-wrapped float64 model on its own samples, 3 micro-batches a step (the
first two under no_sync), clipping after the last backward as HF's Trainer does. The probe's
hooks must read each process's own micro-batch gradients and its own accumulated gradient
before DDP averages it; the numbers its noise scale receives are the processes' means. Rank 0
writes what the noise scale received and, computed one by one on copies of the parameters, what
it should have received, to the JSON file named by argv[1].
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from date_engine import baseline, plan_for
from date_engine.integrations.probing import InRunProbe

MICRO, ACCUMULATION, STEPS = 4, 3, 3


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(),
                                torch.nn.Linear(7, 2)).double()
    wrapped = DistributedDataParallel(model)
    spec = baseline(batch_size=MICRO * ACCUMULATION * world, lr=0.1, iterations=40,
                    dataset_size=960, optimizer="sgd")
    run = plan_for(spec, batch=MICRO * ACCUMULATION * world, devices=world, micro_batch=MICRO)
    last = [False]
    meter = InRunProbe(spec, run, "unused.json", lambda: last[0])
    meter.attach(model)
    seen = []
    update = meter.noise.update
    meter.noise.update = lambda *args: seen.append(list(args)) or update(*args)
    generator = torch.Generator().manual_seed(1 + rank)
    expected, previous = [], None
    for _ in range(STEPS):
        micro = []
        for i in range(ACCUMULATION):
            x = torch.randn(MICRO, 5, dtype=torch.float64, generator=generator)
            y = torch.randn(MICRO, 2, dtype=torch.float64, generator=generator)
            copies = {n: p.detach().clone().requires_grad_() for n, p in model.named_parameters()}
            reference = torch.nn.functional.mse_loss(
                torch.func.functional_call(model, copies, (x,)), y)
            micro.append(torch.cat([g.flatten() for g in torch.autograd.grad(
                reference, list(copies.values()))]))
            last[0] = i == ACCUMULATION - 1
            if last[0]:
                (torch.nn.functional.mse_loss(wrapped(x), y) / ACCUMULATION).backward()
            else:
                with wrapped.no_sync():
                    (torch.nn.functional.mse_loss(wrapped(x), y) / ACCUMULATION).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-9)
        meter.end_step(ACCUMULATION)
        model.zero_grad(set_to_none=True)
        mean = torch.stack(micro).mean(0)
        expected.append([sum(g.dot(g).item() for g in micro) / ACCUMULATION, mean.dot(mean).item(),
                         None if previous is None else mean.dot(previous).item()])
        previous = mean
    everyone = [None] * world
    dist.all_gather_object(everyone, expected)
    if rank == 0:
        means = []
        for step in range(STEPS):
            values = [[e[step][k] for e in everyone] for k in range(3)]
            means.append([None if v[0] is None else sum(v) / world for v in values])
        with open(out, "w") as f:
            json.dump({"seen": seen, "expected": means}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
