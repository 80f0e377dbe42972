"""Hugging Face's Trainer on a date_engine plan: the batch split, steps, LR, β2, ε and λ as
TrainingArguments, and DATE's optimizer with the plan's LR curve through DateTrainer.

    pip install -e '.[hf]'
    python examples/hf_trainer.py                                # one process
    torchrun --nproc-per-node 2 examples/hf_trainer.py           # two (gloo on a CPU)
    torchrun --nproc-per-node 2 examples/hf_trainer.py runs/hf   # resumable, in runs/hf

Given a folder, the run saves a checkpoint there each fifth of its steps and, started again (a
requeued job, say), continues from the newest complete one (a save cut short by a kill is passed
over): the plan's LR at every later step, the weights of a run never stopped. It writes the
trained weights to final.pt.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _digits beside this file
from _digits import MLP, digits, plan

from date_engine.integrations.hf import DateTrainer, last_checkpoint, training_arguments


def main(folder: str | None = None) -> float:
    run = plan(devices=int(os.environ.get("WORLD_SIZE", "1")))
    x, y, x_eval, y_eval = digits()
    train = [{"x": a, "labels": b} for a, b in zip(x, y)]
    with tempfile.TemporaryDirectory() as scratch:
        out = folder or scratch
        args = training_arguments(run, output_dir=out, use_cpu=True, report_to="none",
                                  save_strategy="steps" if folder else "no",
                                  save_steps=run.last_step // 5, logging_steps=8,
                                  disable_tqdm=True, ddp_find_unused_parameters=False,
                                  seed=0, data_seed=0)
        trainer = DateTrainer(model=MLP(), args=args, train_dataset=train, run=run)
        # HF's own checkpoint: weights, optimizer, the plan's step, RNG and the data's position
        trainer.train(resume_from_checkpoint=folder and last_checkpoint(folder))
    model = trainer.model
    if folder and trainer.is_world_process_zero():
        torch.save(model.state_dict(), os.path.join(folder, "final.pt"))
    with torch.no_grad():
        accuracy = (model(x_eval).argmax(1) == y_eval).float().mean().item()
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"{run.plan.total_iterations} steps at batch {run.split.batch} "
              f"(peak LR {run.plan.peak_lr:.4g}): eval accuracy {accuracy:.3f}")
    return accuracy


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
