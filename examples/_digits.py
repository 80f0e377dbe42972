"""The tiny problem the integration examples share: an MLP on scikit-learn's 8×8 digits (installed
with date-engine, no download), its baseline and the plan at 8× that baseline's batch."""

from __future__ import annotations

import torch

from date_engine import baseline, plan_for

TRAIN = 1024
"""Training samples: the first 1024 of the 1,797 digits; the rest evaluate."""

BASELINE = baseline(batch_size=16, lr=2e-3, warmup_epochs=0.25, epochs=4, dataset_size=TRAIN,
                    optimizer="adamw", weight_decay=0.01)
"""A run that works at batch 16: AdamW at 2e-3, a quarter-epoch warmup, 4 epochs."""
BATCH = 128
"""The target: 8× the baseline's batch."""
MICRO_BATCH = 32
"""Samples per process per pass; the rest of each process's share is accumulation."""


def plan(devices: int):
    """The plan at BATCH over ``devices`` processes: peak LR, β2, ε, λ, warmup, steps, split."""
    return plan_for(BASELINE, BATCH, devices=devices, micro_batch=MICRO_BATCH)


def digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train x, train y, eval x, eval y), pixels scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32) / 16.0
    y = torch.tensor(y, dtype=torch.long)
    return x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:]


class MLP(torch.nn.Module):
    """64 → 64 → 10, the same weights on every process (seeded)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, 10))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None):
        logits = self.net(x)
        if labels is None:
            return logits
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}
