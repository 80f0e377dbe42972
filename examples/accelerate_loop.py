"""An accelerate training loop on a date_engine plan. accelerate steps a *prepared* scheduler once
per process for every optimizer step; the plan's schedule is per optimizer step, so it is built
with ``step_scheduler_with_optimizer=False`` and stepped by hand when the gradients sync.

    pip install -e '.[hf]'
    python examples/accelerate_loop.py                           # one process
    torchrun --nproc-per-node 2 examples/accelerate_loop.py      # two (gloo on a CPU)
    torchrun --nproc-per-node 2 examples/accelerate_loop.py runs/acc   # resumable, in runs/acc

Given a folder, the loop saves its state there (``save_state``: weights, optimizer, the plan's
step, RNG) each fifth of its steps and, started again, loads the newest (``load_state``) and skips
the epoch's batches already trained: each epoch's order comes from its number, so the resumed
run sees the batches the uninterrupted one would. It writes the trained weights to final.pt.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from accelerate import Accelerator, PartialState

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _digits beside this file
from _digits import MLP, digits, plan

from date_engine import optimizer_for, scheduler_for


def main(folder: str | None = None) -> float:
    run = plan(devices=PartialState(cpu=True).num_processes)
    accelerator = Accelerator(cpu=True, step_scheduler_with_optimizer=False,
                              gradient_accumulation_steps=run.split.accumulation_steps)
    x, y, x_eval, y_eval = digits()
    generator = torch.Generator()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), shuffle=True,
                                         batch_size=run.split.micro_batch, generator=generator)
    model = MLP()
    optimizer = optimizer_for(model, run)      # DATE over AdamW with the plan's β2, ε, λ
    scheduler = scheduler_for(optimizer, run)  # not prepared: stepped once per optimizer step
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    accelerator.register_for_checkpointing(scheduler)  # saved and loaded with the rest
    saved = sorted(Path(folder).glob("step-*")) if folder else []
    if saved:
        accelerator.load_state(str(saved[-1]))
    step, per_epoch = scheduler.last_epoch, len(loader) // run.split.accumulation_steps
    while step < run.last_step:
        epoch, done = divmod(step, per_epoch)
        generator.manual_seed(epoch)  # the epoch's order, the same when a resumed run gets here
        batches = accelerator.skip_first_batches(loader, done * run.split.accumulation_steps)
        for xb, yb in batches:
            with accelerator.accumulate(model):
                accelerator.backward(model(xb, yb)["loss"])
                optimizer.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                scheduler.step()
                step += 1
                if folder and step % (run.last_step // 5) == 0:
                    accelerator.save_state(os.path.join(folder, f"step-{step:06d}"))
                if step == run.last_step or step % per_epoch == 0:
                    break
    if folder and accelerator.is_main_process:
        torch.save(accelerator.unwrap_model(model).state_dict(), os.path.join(folder, "final.pt"))
    with torch.no_grad():
        accuracy = (model(x_eval).argmax(1) == y_eval).float().mean().item()
    if accelerator.is_main_process:
        print(f"{step} steps at batch {run.split.batch} (peak LR {run.plan.peak_lr:.4g}): "
              f"eval accuracy {accuracy:.3f}")
    return accuracy


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
