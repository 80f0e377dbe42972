"""Listings as tables: the registered recipes (``date recipes``)."""

from __future__ import annotations

from rich.table import Table

from date_engine.recipes import Recipe

__all__ = ["recipes_table"]


def recipes_table(recipes: list[Recipe]) -> Table:
    """Name, model, data set, parameters, training samples and metric of each recipe (builds each
    model once to count its parameters)."""
    table = Table(title="Recipes", title_justify="left")
    for col in ("name", "model", "data set", "parameters", "samples", "metric"):
        table.add_column(col)
    for r in recipes:
        params = sum(p.numel() for p in r.build_model(r.parse_options()).parameters())
        table.add_row(r.name, r.model_name, r.dataset_name, f"{params:,}",
                      f"{r.dataset_size:,}" if r.dataset_size else "from the data",
                      f"{r.metric_name} ({'higher' if r.higher_is_better else 'lower'} is better)")
    return table
