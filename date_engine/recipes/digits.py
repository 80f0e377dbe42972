"""lenet-digits: LeNet-5 on scikit-learn's bundled 8×8 handwritten digits (real scans, offline).

1,797 images (UCI optical digits, BSD-3) split once, stratified, into 1,437 training and 360 test
images. Small enough to scale a baseline 16× on a laptop CPU in seconds: the README's first command.
"""

from __future__ import annotations

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
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        raise DateError(
            "recipe lenet-digits reads scikit-learn's bundled digits, and scikit-learn is not "
            "installed; run: pip install scikit-learn"
        ) from None
    x, y = load_digits(return_X_y=True)
    # one fixed split, whatever the run's seed, so that every run is scored on the same test set
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=TEST_SIZE, stratify=y, random_state=0)
    images = lambda a: torch.tensor(a, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0  # noqa: E731
    labels = lambda a: torch.tensor(a, dtype=torch.long)  # noqa: E731
    return RecipeData(
        TensorData(images(xtr), labels(ytr)), TensorData(images(xte), labels(yte)), collate_batch
    )


@register_recipe("lenet-digits")
def lenet_digits() -> Recipe:
    return classification_recipe(
        "lenet-digits", "LeNet-5 (8×8 input)", "scikit-learn digits, 8×8 scans", 256, TRAIN_SIZE,
        _model, _data, "LeNet-5 on 1,437 real 8×8 digit scans; test accuracy on 360 held out.")
