"""lenet-digits: LeNet-5 on scikit-learn's bundled 8×8 handwritten digits (real scans, offline).

1,797 images (UCI optical digits, BSD-3) split once, stratified, into 1,437 training and 360 test
images. Small enough to scale a baseline 16× on a laptop CPU in seconds: the README's first command.
"""

from __future__ import annotations

import json
from pathlib import Path

from date_engine.errors import DateError
from date_engine.recipes import DataOptions, Recipe, RecipeData, register_recipe
from date_engine.recipes._classification import classification_recipe

TRAIN_SIZE, TEST_SIZE = 1437, 360


def _model(options=None):
    from date_engine.models.lenet import LeNet

    return LeNet(in_channels=1, image_size=8, num_classes=10)


def _data(options: DataOptions, model_options=None) -> RecipeData:
    import torch

    from date_engine.data.tensors import TensorData, collate_batch

    if options.synthetic:
        gen = torch.Generator().manual_seed(options.seed)

        def make(n):
            return torch.rand(n, 1, 8, 8, generator=gen), torch.randint(0, 10, (n,), generator=gen)

        return RecipeData(
            TensorData(*make(TRAIN_SIZE)),
            TensorData(*make(TEST_SIZE)),
            collate_batch,
            note="generated samples of the digits' shapes (dry run)",
        )
    x, y = load_digits()
    # one fixed split, whatever the run's seed, so that every run is scored on the same test set
    split = json.loads((Path(__file__).parent / "digits_split.json").read_text())
    train, test = torch.tensor(split["train"]), torch.tensor(split["test"])
    images = x.view(-1, 1, 8, 8) / 16.0
    return RecipeData(TensorData(images[train], y[train]), TensorData(images[test], y[test]),
                      collate_batch)


def load_digits():
    """(images, labels) as scikit-learn's ``load_digits`` returns them (1,797 rows of 64 pixel
    values 0–16, float32; int64 labels), read from the CSV file scikit-learn ships without
    importing scikit-learn (a second a process). The split into training and test images is
    ``train_test_split(..., test_size=360, stratify=labels, random_state=0)``'s, kept in
    digits_split.json (tests/test_recipes.py checks both against scikit-learn's)."""
    import gzip
    import importlib.util

    import numpy as np
    import torch

    try:
        spec = importlib.util.find_spec("sklearn")
    except ValueError:  # imported as None: blocked
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise DateError(
            "recipe lenet-digits reads scikit-learn's bundled digits, and scikit-learn is not "
            "installed; run: pip install scikit-learn"
        )
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    try:
        with gzip.open(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",")
    except OSError as exc:
        raise DateError(f"{path}: scikit-learn's digits cannot be read ({exc}); reinstall "
                        "scikit-learn.") from None
    return (torch.tensor(table[:, :-1], dtype=torch.float32),
            torch.tensor(table[:, -1], dtype=torch.long))


@register_recipe("lenet-digits")
def lenet_digits() -> Recipe:
    return classification_recipe(
        "lenet-digits", "LeNet-5 (8×8 input)", "scikit-learn digits, 8×8 scans", 256, TRAIN_SIZE,
        _model, _data, "LeNet-5 on 1,437 real 8×8 digit scans; test accuracy on 360 held out.")
