"""Images in the ImageFolder layout (``root/<split>/<class>/<image>``), decoded with Pillow, with
the standard ImageNet transforms written in plain torch (no torchvision).

Training: a random crop of 8–100% of the area at aspect ratio 3/4–4/3, resized to 224×224, a random
horizontal flip, then normalisation by ImageNet's channel means and deviations. Evaluation: the
shorter side resized to 256, a 224×224 centre crop, the same normalisation. Random draws use torch's
generator, which the DataLoader seeds per worker.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch.utils.data import Dataset

from date_engine.errors import DataError, DataMissing

__all__ = ["ImageFolder", "eval_transform", "find_image_folders", "train_transform"]

EXTENSIONS = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise DataError("reading images needs Pillow; run: pip install Pillow") from None
    return Image


class ImageFolder(Dataset):
    """(image tensor, class index) for every image file under ``root/<class>/``; classes sorted."""

    def __init__(self, root: str | Path, transform, classes: list[str] | None = None) -> None:
        self.root = Path(root)
        found = sorted(d.name for d in self.root.iterdir() if d.is_dir())
        self.classes = classes if classes is not None else found
        if not self.classes:
            raise DataError(f"{self.root}: no class folders; expected {self.root}/<class>/<image>.")
        unknown = sorted(set(found) - set(self.classes))
        if unknown:
            raise DataError(
                f"{self.root}: class folders {unknown[:5]} are not in the training set's "
                "classes; evaluation and training need the same class folders."
            )
        index = {c: i for i, c in enumerate(self.classes)}
        self.samples = [
            (p, index[d])
            for d in found
            for p in sorted((self.root / d).iterdir())
            if p.suffix.lower() in EXTENSIONS
        ]
        if not self.samples:
            raise DataError(
                f"{self.root}: no image files ({', '.join(sorted(EXTENSIONS))}) in its "
                "class folders."
            )
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        path, label = self.samples[i]
        Image = _pil()
        try:
            with Image.open(path) as img:
                image = img.convert("RGB")
        except Exception as exc:  # Pillow raises several types for a bad file
            raise DataError(
                f"{path}: cannot be decoded as an image ({exc}); remove or replace it."
            ) from None
        return self.transform(image), label


def find_image_folders(root: str | Path, splits=("train", "val")) -> dict[str, Path]:
    root = Path(root)
    missing = [root / s for s in splits if not (root / s).is_dir()]
    if missing:
        raise DataMissing(
            f"ImageFolder tree not found: missing {', '.join(str(m) for m in missing)} (expected "
            f"{root}/train/<class>/<image> and {root}/val/<class>/<image>, as for ImageNet). Set "
            "train.data_dir to the folder holding train/ and val/."
        )
    return {s: root / s for s in splits}


def _to_tensor(image) -> torch.Tensor:
    data = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
    x = data.view(image.size[1], image.size[0], 3).permute(2, 0, 1).float().div_(255)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    return (x - mean) / std


def train_transform(size: int = 224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    def transform(image):
        Image = _pil()
        width, height = image.size
        area = width * height
        for _ in range(10):
            target = area * float(torch.empty(1).uniform_(*scale))
            aspect = math.exp(
                float(torch.empty(1).uniform_(math.log(ratio[0]), math.log(ratio[1])))
            )
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                left = int(torch.randint(0, width - w + 1, (1,)))
                top = int(torch.randint(0, height - h + 1, (1,)))
                break
        else:  # fall back to a centre crop of the whole image
            w = h = min(width, height)
            left, top = (width - w) // 2, (height - h) // 2
        image = image.resize((size, size), Image.BILINEAR, box=(left, top, left + w, top + h))
        if float(torch.rand(1)) < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        return _to_tensor(image)

    return transform


def eval_transform(size: int = 224, resize: int = 256):
    def transform(image):
        Image = _pil()
        width, height = image.size
        scale = resize / min(width, height)
        image = image.resize(
            (max(1, round(width * scale)), max(1, round(height * scale))), Image.BILINEAR
        )
        width, height = image.size
        left, top = (width - size) // 2, (height - size) // 2
        return _to_tensor(image.crop((left, top, left + size, top + size)))

    return transform
