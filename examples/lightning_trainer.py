"""PyTorch Lightning on a date_engine plan: the Trainer's devices, accumulation and steps from the
plan, DATE's optimizer and the plan's LR (stepped per optimizer step) from configure_optimizers,
and a callback that checks the Trainer against the plan before the first step.

    pip install -e '.[lightning]'
    python examples/lightning_trainer.py                                 # one process
    torchrun --nproc-per-node 2 examples/lightning_trainer.py            # two (gloo on a CPU)
    torchrun --nproc-per-node 2 examples/lightning_trainer.py runs/pl    # resumable, in runs/pl

Given a folder, the run saves a checkpoint there at each epoch's last step (last.ckpt the newest)
and, started again, continues from last.ckpt through ``fit(ckpt_path=...)``: the plan's LR at
every later step, the weights of a run never stopped. Lightning does not save the data's position
within an epoch, nor, on one process, the order of the next epochs (DDP's DistributedSampler
draws each epoch's order from its number); a checkpoint saved at the epoch's end
(``every_n_epochs``) resumes one batch off. It writes the trained weights to final.pt.
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


def main(folder: str | None = None) -> float:
    run = plan(devices=int(os.environ.get("WORLD_SIZE", "1")))
    x, y, x_eval, y_eval = digits()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                         batch_size=run.split.micro_batch, shuffle=True)
    module = Classifier(run)
    per_epoch = len(loader) // run.split.world_size // run.split.accumulation_steps
    saving = [L.pytorch.callbacks.ModelCheckpoint(dirpath=folder, save_last=True, save_top_k=-1,
                                                  every_n_train_steps=per_epoch)] if folder else []
    trainer = L.Trainer(**trainer_settings(run), accelerator="cpu",
                        strategy="ddp" if run.split.world_size > 1 else "auto",
                        callbacks=[DatePlan(run)] + saving, logger=False,
                        enable_checkpointing=bool(folder), enable_progress_bar=False,
                        enable_model_summary=False)
    L.seed_everything(0, verbose=False)
    last = folder and os.path.join(folder, "last.ckpt")
    trainer.fit(module, loader, ckpt_path=last if last and os.path.exists(last) else None)
    if folder and trainer.is_global_zero:
        torch.save(module.model.state_dict(), os.path.join(folder, "final.pt"))
    with torch.no_grad():
        accuracy = (module.model(x_eval).argmax(1) == y_eval).float().mean().item()
    if trainer.is_global_zero:
        print(f"{trainer.global_step} steps at batch {run.split.batch} "
              f"(peak LR {run.plan.peak_lr:.4g}): eval accuracy {accuracy:.3f}")
    return accuracy


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
