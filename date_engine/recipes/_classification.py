"""What the image-classification recipes share: cross-entropy loss, correct counts, accuracy in %,
and the record that puts them together with a model and its data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from date_engine.recipes import DataOptions, Recipe, RecipeData


def cross_entropy_loss(model, batch, data=None) -> Any:
    import torch.nn.functional as F

    x, y = batch
    return F.cross_entropy(model(x), y)


def correct_count(model, batch, data=None) -> dict[str, Any]:
    x, y = batch
    return {"correct": (model(x).argmax(1) == y).sum(), "count": len(y)}


def accuracy_percent(stats: dict[str, float]) -> float:
    return 100.0 * stats["correct"] / max(stats["count"], 1)


def classification_recipe(name: str, model_name: str, dataset_name: str, micro_batch: int,
                          dataset_size: int | None, build_model: Callable[[Any], Any],
                          build_data: Callable[[DataOptions, Any], RecipeData], description: str,
                          options: type | None = None) -> Recipe:
    """A recipe trained with cross-entropy and scored by accuracy (%, higher is better)."""
    return Recipe(name=name, model_name=model_name, dataset_name=dataset_name,
                  metric_name="accuracy", higher_is_better=True, default_micro_batch=micro_batch,
                  dataset_size=dataset_size, build_model=build_model, build_data=build_data,
                  loss=cross_entropy_loss, evaluate=correct_count, metric=accuracy_percent,
                  options=options, description=description)
