"""Listings as tables: the registered recipes (``date recipes``)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from date_engine.recipes import Recipe

__all__ = ["recipe_rows", "recipes_table", "shipped_baselines"]


def recipe_rows(recipes: list[Recipe]) -> list[dict[str, Any]]:
    """Name, model, data set, parameters, training samples, metric and shipped baselines of each
    recipe (each model's parameters counted on torch's meta device: no weights are made)."""
    baselines = shipped_baselines()
    rows = []
    for r in recipes:
        params = r.parameter_count(r.parse_options())
        rows.append({"name": r.name, "model": r.model_name, "dataset": r.dataset_name,
                     "parameters": params, "samples": r.dataset_size, "metric": r.metric_name,
                     "higher_is_better": r.higher_is_better,
                     "baselines": baselines.get(r.name, [])})
    return rows


def shipped_baselines() -> dict[str, list[str]]:
    """The shipped baseline YAMLs by the recipe they train (lstm-mnist: lstm-mnist and
    lstm-mnist-adam): the names ``date plan NAME`` and ``date recipes copy NAME`` take."""
    import yaml

    from date_engine.recipes import shipped_specs

    out: dict[str, list[str]] = {}
    for name, path in shipped_specs().items():
        recipe = (yaml.safe_load(path.read_text()) or {}).get("recipe")
        out.setdefault(str(recipe), []).append(name)
    return {recipe: sorted(names, key=lambda n: (n != recipe, n)) for recipe, names in out.items()}


def recipes_table(recipes: list[Recipe]) -> Table:
    """The rows as a table that folds long cells rather than cutting them."""
    rows = recipe_rows(recipes)
    table = Table(title="Recipes", title_justify="left")
    table.add_column("name", no_wrap=True, min_width=max((len(r["name"]) for r in rows), default=4))
    for col in ("model", "data set", "parameters", "samples", "metric", "shipped baselines"):
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(row["name"], row["model"], row["dataset"], f"{row['parameters']:,}",
                      f"{row['samples']:,}" if row["samples"] else "from the data",
                      f"{row['metric']} ({'higher' if row['higher_is_better'] else 'lower'} is "
                      "better)", ", ".join(row["baselines"]) or "—")
    return table


def print_recipes(recipes: list[Recipe], as_json: bool, terminal: bool) -> None:
    """``date recipes``: a JSON list, a table on a terminal, else one tab-separated line per
    recipe with every field whole."""
    import json

    if as_json:
        print(json.dumps(recipe_rows(recipes), indent=2))
    elif terminal:
        from rich.console import Console

        Console().print(recipes_table(recipes))
    else:
        for row in recipe_rows(recipes):
            print("\t".join("" if v is None else ",".join(v) if isinstance(v, list) else str(v)
                            for v in row.values()))
