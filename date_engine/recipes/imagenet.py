"""resnet50-imagenet: ResNet-50 on an ImageFolder tree (``train/<class>/…``, ``val/<class>/…``).

Images are decoded with Pillow in DataLoader workers (``train.num_workers``) with the standard
transforms (random-resized crop and flip for training; resize and centre crop for evaluation). The
metric is top-1 accuracy on ``val``; ``--set model.num_classes=N`` for a tree with N classes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from date_engine.recipes import DataOptions, Recipe, RecipeData, register_recipe
from date_engine.recipes._classification import classification_recipe


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    num_classes: int = Field(default=1000, gt=1)
    image_size: int = Field(default=224, gt=31)


def _data(options: DataOptions, model: Options) -> RecipeData:
    import torch

    from date_engine.data.images import (
        ImageFolder,
        eval_transform,
        find_image_folders,
        train_transform,
    )
    from date_engine.data.tensors import TensorData, collate_batch

    if options.synthetic:
        gen = torch.Generator().manual_seed(options.seed)
        size = model.image_size

        def make(n):
            return (torch.randn(n, 3, size, size, generator=gen),
                    torch.randint(0, model.num_classes, (n,), generator=gen))

        return RecipeData(
            TensorData(*make(16)),
            TensorData(*make(8)),
            collate_batch,
            note="generated images of ImageNet's shape",
        )
    folders = find_image_folders(options.data_dir or "data/imagenet")
    train = ImageFolder(folders["train"], train_transform(model.image_size))
    if len(train.classes) > model.num_classes:
        from date_engine.errors import DataError

        raise DataError(
            f"{folders['train']}: {len(train.classes)} class folders but the model has "
            f"{model.num_classes} outputs; set model.num_classes={len(train.classes)}."
        )
    val = ImageFolder(
        folders["val"],
        eval_transform(model.image_size, round(model.image_size * 8 / 7)),
        classes=train.classes,
    )
    return RecipeData(train, val, None)


def _model(options: Options):
    from date_engine.models.resnet import resnet50

    return resnet50(options.num_classes)


@register_recipe("resnet50-imagenet")
def resnet50_imagenet() -> Recipe:
    return classification_recipe(
        "resnet50-imagenet", "ResNet-50 (v1.5)", "ImageNet (ImageFolder)", 128, 1_281_167, _model,
        _data, "ResNet-50 on an ImageFolder tree; top-1 accuracy on val.", options=Options)
