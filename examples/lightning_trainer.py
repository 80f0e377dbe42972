"""PyTorch Lightning on a date_engine plan: the Trainer's devices, accumulation and steps from the
plan, DATE's optimizer and the plan's LR (stepped per optimizer step) from configure_optimizers,
and a callback that checks the Trainer against the plan before the first step.

    pip install -e '.[lightning]'
    python examples/lightning_trainer.py                                 # one process
    torchrun --nproc-per-node 2 examples/lightning_trainer.py            # two (gloo on a CPU)
"""

from __future__ import annotations

import os
import sys

import lightning as L
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _digits beside this file
from _digits import MLP, digits, plan

from date_engine.integrations.lightning import DatePlan, optimizers_for, trainer_settings


class Classifier(L.LightningModule):
    def __init__(self, run) -> None:
        super().__init__()
        self.run, self.model = run, MLP()

    def training_step(self, batch, batch_idx):
        x, y = batch
        return self.model(x, y)["loss"]

    def configure_optimizers(self):
        return optimizers_for(self.model, self.run)


def main() -> float:
    run = plan(devices=int(os.environ.get("WORLD_SIZE", "1")))
    x, y, x_eval, y_eval = digits()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                         batch_size=run.split.micro_batch, shuffle=True)
    module = Classifier(run)
    trainer = L.Trainer(**trainer_settings(run), accelerator="cpu",
                        strategy="ddp" if run.split.world_size > 1 else "auto",
                        callbacks=[DatePlan(run)], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    L.seed_everything(0, verbose=False)
    trainer.fit(module, loader)
    with torch.no_grad():
        accuracy = (module.model(x_eval).argmax(1) == y_eval).float().mean().item()
    if trainer.is_global_zero:
        print(f"{trainer.global_step} steps at batch {run.split.batch} "
              f"(peak LR {run.plan.peak_lr:.4g}): eval accuracy {accuracy:.3f}")
    return accuracy


if __name__ == "__main__":
    main()
