"""``date recipes new NAME``: a recipe of your own to fill in, and its baseline, that run as
written (an MLP on scikit-learn's digits) until you put your model and data in."""

from __future__ import annotations

import re
from pathlib import Path

from date_engine.errors import DateError

__all__ = ["write_template"]

RECIPE = '''"""{name}: a recipe for date_engine. Put your model and data in; keep the names.

    date plan {name}.yaml --batch 1024          # what the plan derives from your baseline
    date scale {name}.yaml --batch 64           # train the baseline at its own batch
"""

import torch

from date_engine.recipes.simple import classifier


def model() -> torch.nn.Module:
    """A fresh model; the trainer seeds torch before calling this."""
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 10))


def data():
    """(train, eval): each a pair of tensors (inputs, targets), or a dataset of such pairs."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32) / 16.0
    y = torch.tensor(y, dtype=torch.long)
    return (x[:1437], y[:1437]), (x[1437:], y[1437:])


def recipe():
    """What the spec's `recipe: {module}:recipe` names."""
    return classifier("{name}", model=model, data=data, micro_batch=64, dataset_size=1437)
'''

SPEC = '''# The baseline that works for {name}: the large batch's plan is derived from it.
recipe: {module}:recipe
baseline:
  batch_size: 64          # B0: the global batch of the run that works
  lr: 0.001               # its peak learning rate
  warmup_epochs: 1        # its warmup (0 for none)
  epochs: 20              # its length (or iterations: N)
  optimizer:
    name: adamw           # sgd, momentum, nesterov, adagrad, rmsprop, adam, adamw, lars, lamb
    weight_decay: 0.01
'''


def write_template(name: str, folder: Path, force: bool = False) -> tuple[Path, Path]:
    """Write NAME.py and NAME.yaml into ``folder``; refuses a name that is not a Python module
    name and files that exist (unless ``force``). Returns both paths."""
    from date_engine.checks import output_file

    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        fixed = re.sub(r"\W", "_", name).lstrip("0123456789") or "my_recipe"
        raise DateError(f"{name!r}: the recipe's file must be importable as a Python module; "
                        f"use a name of letters, digits and underscores, e.g. {fixed}.")
    py, yaml = folder / f"{name}.py", folder / f"{name}.yaml"
    for path in (py, yaml):
        if path.exists() and not force:
            raise DateError(f"{path} exists; pass --force to overwrite it, or choose another "
                            "NAME.")
    output_file(py, "NAME", (".py",))
    py.write_text(RECIPE.format(name=name, module=name))
    yaml.write_text(SPEC.format(name=name, module=name))
    return py, yaml
