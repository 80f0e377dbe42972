"""An accelerate training loop on a date_engine plan. accelerate steps a *prepared* scheduler once
per process for every optimizer step; the plan's schedule is per optimizer step, so it is built
with ``step_scheduler_with_optimizer=False`` and stepped by hand when the gradients sync.

    pip install -e '.[hf]'
    python examples/accelerate_loop.py                           # one process
    torchrun --nproc-per-node 2 examples/accelerate_loop.py      # two (gloo on a CPU)
"""

from __future__ import annotations

import os
import sys

import torch
from accelerate import Accelerator, PartialState

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _digits beside this file
from _digits import MLP, digits, plan

from date_engine import optimizer_for, scheduler_for


def main() -> float:
    run = plan(devices=PartialState(cpu=True).num_processes)
    accelerator = Accelerator(cpu=True, step_scheduler_with_optimizer=False,
                              gradient_accumulation_steps=run.split.accumulation_steps)
    x, y, x_eval, y_eval = digits()
    generator = torch.Generator().manual_seed(0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), shuffle=True,
                                         batch_size=run.split.micro_batch, generator=generator)
    model = MLP()
    optimizer = optimizer_for(model, run)      # DATE over AdamW with the plan's β2, ε, λ
    scheduler = scheduler_for(optimizer, run)  # not prepared: stepped once per optimizer step
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    step = 0
    while step < run.last_step:
        for xb, yb in loader:
            with accelerator.accumulate(model):
                accelerator.backward(model(xb, yb)["loss"])
                optimizer.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                scheduler.step()
                step += 1
                if step == run.last_step:
                    break
    with torch.no_grad():
        accuracy = (model(x_eval).argmax(1) == y_eval).float().mean().item()
    if accelerator.is_main_process:
        print(f"{step} steps at batch {run.split.batch} (peak LR {run.plan.peak_lr:.4g}): "
              f"eval accuracy {accuracy:.3f}")
    return accuracy


if __name__ == "__main__":
    main()
