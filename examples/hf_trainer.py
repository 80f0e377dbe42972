"""Hugging Face's Trainer on a date_engine plan: the batch split, steps, LR, β2, ε and λ as
TrainingArguments, and DATE's optimizer with the plan's LR curve through DateTrainer.

    pip install -e '.[hf]'
    python examples/hf_trainer.py                                # one process
    torchrun --nproc-per-node 2 examples/hf_trainer.py           # two (gloo on a CPU)
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _digits beside this file
from _digits import MLP, digits, plan

from date_engine.integrations.hf import DateTrainer, training_arguments


def main() -> float:
    run = plan(devices=int(os.environ.get("WORLD_SIZE", "1")))
    x, y, x_eval, y_eval = digits()
    train = [{"x": a, "labels": b} for a, b in zip(x, y)]
    with tempfile.TemporaryDirectory() as out:
        args = training_arguments(run, output_dir=out, use_cpu=True, report_to="none",
                                  save_strategy="no", logging_steps=8, disable_tqdm=True,
                                  ddp_find_unused_parameters=False,
                                  seed=0, data_seed=0)
        trainer = DateTrainer(model=MLP(), args=args, train_dataset=train, plan=run)
        trainer.train()
    model = trainer.model
    with torch.no_grad():
        accuracy = (model(x_eval).argmax(1) == y_eval).float().mean().item()
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"{run.plan.total_iterations} steps at batch {run.split.batch} "
              f"(peak LR {run.plan.peak_lr:.4g}): eval accuracy {accuracy:.3f}")
    return accuracy


if __name__ == "__main__":
    main()
