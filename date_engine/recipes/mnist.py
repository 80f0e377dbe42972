"""lenet-mnist and lstm-mnist, the paper's two MNIST applications, and vit-mnist, a small Vision
Transformer, on MNIST's IDX files.

``train.data_dir`` holds ``{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]`` (also under
``MNIST/raw/``, as torchvision writes them). Fashion-MNIST's files have the same names and format,
so the same recipes read it unchanged. ``date data prepare mnist <folder>`` lays out real MNIST.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from date_engine.recipes import (
    DataOptions,
    Recipe,
    RecipeData,
    check_heads,
    register_recipe,
)
from date_engine.recipes._classification import classification_recipe

TRAIN_SIZE = 60_000


class LSTMOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hidden: int = Field(default=128, gt=0)
    """LSTM units (the paper: 128)."""


class ViTOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    patch: int = Field(default=7, gt=0)
    """Patch side in pixels; it must divide 28 (7: 16 patches, 4: 49, about 3× the compute)."""
    dim: int = Field(default=64, gt=0)
    """Width of the tokens."""
    layers: int = Field(default=4, gt=0)
    heads: int = Field(default=4, gt=0)
    """Attention heads; they must divide ``dim``."""
    mlp: int = Field(default=128, gt=0)
    """Hidden width of each block's MLP."""

    @model_validator(mode="after")
    def _fits(self) -> ViTOptions:
        if 28 % self.patch:
            raise ValueError(f"patch {self.patch} does not tile a 28-pixel image; use a "
                             "divisor of 28 (2, 4, 7, 14)")
        check_heads(self.dim, self.heads)
        return self


def _mnist(options: DataOptions, model_options=None) -> RecipeData:
    import torch

    from date_engine.data.idx import load_mnist
    from date_engine.data.tensors import TensorData, collate_batch

    if options.synthetic:
        gen = torch.Generator().manual_seed(options.seed)
        make = lambda n: (torch.rand(n, 1, 28, 28, generator=gen),  # noqa: E731
                          torch.randint(0, 10, (n,), generator=gen))
        return RecipeData(TensorData(*make(512)), TensorData(*make(128)), collate_batch,
                          note="generated samples of MNIST's shapes")
    xtr, ytr, xte, yte = load_mnist(options.data_dir or "data/mnist")
    return RecipeData(TensorData(xtr, ytr), TensorData(xte, yte), collate_batch)


def _lenet(options=None):
    from date_engine.models.lenet import LeNet

    return LeNet(in_channels=1, image_size=28, num_classes=10)


def _lstm(options: LSTMOptions):
    from date_engine.models.lstm import RowLSTM

    return RowLSTM(rows=28, hidden=options.hidden, num_classes=10)


def _vit(options: ViTOptions):
    from date_engine.models.vit import ViT

    return ViT(image_size=28, patch=options.patch, dim=options.dim, layers=options.layers,
               heads=options.heads, mlp=options.mlp, num_classes=10)


@register_recipe("lenet-mnist")
def lenet_mnist() -> Recipe:
    return classification_recipe(
        "lenet-mnist", "LeNet-5", "MNIST (IDX files)", 1024, TRAIN_SIZE, _lenet, _mnist,
        "LeNet-5 on MNIST; test accuracy on the 10k test images (paper: 99.2%).")


@register_recipe("lstm-mnist")
def lstm_mnist() -> Recipe:
    return classification_recipe(
        "lstm-mnist", "1-layer LSTM over image rows", "MNIST (IDX files)", 512, TRAIN_SIZE, _lstm,
        _mnist, "An LSTM reads the 28 rows of each image; test accuracy (paper: 98.7%).",
        options=LSTMOptions)


@register_recipe("vit-mnist")
def vit_mnist() -> Recipe:
    return classification_recipe(
        "vit-mnist", "Vision Transformer (pre-LN, 7×7 patches)", "MNIST (IDX files)", 256,
        TRAIN_SIZE, _vit, _mnist, "A small ViT over 7×7 patches of each image; test accuracy.",
        options=ViTOptions)
