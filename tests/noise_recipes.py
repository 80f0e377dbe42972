"""A recipe whose gradient noise scale is known in closed form: least squares on a Gaussian design.

x ~ N(0, I_d), y = x·w* + σ·ε; per-sample loss ½(x·w − y)², per-sample gradient x(x·w − y). At
weights w (δ = w − w*) the true gradient is δ, and over the population
tr(Σ) = (d+1)|δ|² + dσ², so B_noise = tr(Σ)/|G|² = d + 1 + dσ²/|δ|². The tests compare the
trainer's estimate with the exact values over the finite training set (:func:`exact`).

Loaded by the real command line through ``--recipe tests.noise_recipes:least_squares``.
"""

from __future__ import annotations

import torch

from date_engine.data.tensors import TensorData, collate_batch
from date_engine.recipes import Recipe, RecipeData

DIM, SAMPLES, SIGMA = 16, 16384, 1.0


def _model(options=None) -> torch.nn.Module:
    model = torch.nn.Linear(DIM, 1, bias=False)
    torch.nn.init.zeros_(model.weight)  # δ = −w*
    return model


def _data(options=None, model_options=None) -> RecipeData:
    x, y = _samples()
    return RecipeData(TensorData(x, y), TensorData(x[:256], y[:256]), collate_batch)


def _samples() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1234)
    w_star = torch.ones(DIM) / DIM**0.5  # |δ| = 1 at w = 0
    x = torch.randn(SAMPLES, DIM, generator=gen)
    y = x @ w_star + SIGMA * torch.randn(SAMPLES, generator=gen)
    return x, y


def _loss(model, batch, data):
    x, y = batch
    return 0.5 * (model(x).squeeze(1) - y).square().mean()


def exact(weights: torch.Tensor | None = None) -> tuple[float, float]:
    """(|G|², tr(Σ)) over the training set at ``weights`` (zeros: the initial weights)."""
    x, y = (t.double() for t in _samples())
    w = torch.zeros(DIM, dtype=torch.float64) if weights is None else weights.double().view(-1)
    per_sample = x * (x @ w - y).unsqueeze(1)
    mean = per_sample.mean(0)
    return float(mean.square().sum()), float((per_sample - mean).square().sum(1).mean())


def least_squares() -> Recipe:
    return Recipe(
        name="least-squares", model_name="linear", dataset_name="Gaussian design",
        metric_name="loss", higher_is_better=False, default_micro_batch=16,
        dataset_size=SAMPLES, build_model=_model, build_data=_data, loss=_loss,
        evaluate=lambda model, batch, data: {
            "loss": float(_loss(model, batch, data)) * len(batch[0]), "n": len(batch[0])},
        metric=lambda totals: totals["loss"] / totals["n"],
    )
