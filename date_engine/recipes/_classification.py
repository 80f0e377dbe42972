"""Loss, evaluation statistics and metric shared by the image-classification recipes."""

from __future__ import annotations

from typing import Any


def cross_entropy_loss(model, batch, data=None) -> Any:
    import torch.nn.functional as F

    x, y = batch
    return F.cross_entropy(model(x), y)


def correct_count(model, batch, data=None) -> dict[str, Any]:
    x, y = batch
    return {"correct": (model(x).argmax(1) == y).sum(), "count": len(y)}


def accuracy_percent(stats: dict[str, float]) -> float:
    return 100.0 * stats["correct"] / max(stats["count"], 1)
