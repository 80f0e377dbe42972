"""MNIST's IDX files (LeCun et al.), gzipped or raw, in the layout torchvision writes.

An IDX file is a 4-byte magic number — two zero bytes, a type code (0x08 for unsigned bytes) and the
number of dimensions — then one big-endian 32-bit size per dimension, then the values. MNIST and
Fashion-MNIST ship four of them: ``{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]``.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import torch

from date_engine.errors import DataError, DataMissing

__all__ = ["MNIST_FILES", "find_mnist", "load_mnist", "read_idx"]

MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> torch.Tensor:
    """The array in an IDX file (``.gz`` or raw), or :class:`DataError` naming what is wrong."""
    path = Path(path)
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DataError(f"{path}: cannot be read as {'gzip' if path.suffix == '.gz' else 'a file'} "
                        f"({exc}); download it again.") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise DataError(f"{path}: not an IDX file (bad magic number {raw[:4].hex() or 'none'}); "
                        "expected MNIST's train/t10k images or labels.")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header; download it again.")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_DTYPES[raw[2]])
    expected = header + int(np.prod(shape)) * dtype.itemsize
    if len(raw) != expected:
        raise DataError(
            f"{path}: holds {len(raw)} bytes, its header {list(shape)} needs {expected}; "
            "the file is truncated or corrupt, download it again."
        )
    array = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return torch.from_numpy(array.astype(dtype.newbyteorder("=")).copy())


def find_mnist(root: str | Path) -> dict[str, Path]:
    """The four MNIST-layout files under ``root``: ``root/MNIST/raw/``, ``root/raw/`` or ``root/``,
    each gzipped or raw. :class:`DataMissing` lists what was looked for where."""
    root = Path(root)
    folders = [root / "MNIST" / "raw", root / "raw", root]
    found, missing = {}, []
    for key, name in MNIST_FILES.items():
        candidates = [folder / (name + ext) for folder in folders for ext in (".gz", "")]
        hit = next((c for c in candidates if c.is_file()), None)
        if hit is None:
            missing.append(name + "[.gz]")
        else:
            found[key] = hit
    if missing:
        raise DataMissing(
            f"MNIST files not found under {root}: missing {', '.join(missing)} (looked in "
            f"{', '.join(str(f) for f in folders)}). Set train.data_dir or --set "
            "train.data_dir=..., or lay out real MNIST there with `date data prepare mnist "
            "<folder>`."
        )
    return found


NUM_CLASSES = 10


def check_labels(labels: torch.Tensor, classes: int, source: Path | str) -> None:
    """Class labels must be whole numbers in 0..classes-1; anything else is refused with the file
    (a cross-entropy loss would fail on it deep inside training, or truncate a float silently)."""
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise DataError(f"{source}: labels are stored as {labels.dtype}; class labels must be "
                        "whole numbers.")
    if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= classes):
        raise DataError(f"{source}: labels must lie in 0..{classes - 1}, found "
                        f"{int(labels.min())}..{int(labels.max())}.")


def load_mnist(root: str | Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Images as float32 in [0, 1] of shape (n, 1, 28, 28) and int64 labels, train then test."""
    files = find_mnist(root)
    arrays = {key: read_idx(path) for key, path in files.items()}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise DataError(
                f"{files[f'{split}_images']}: {split} images {list(images.shape)} do not match "
                f"labels {list(labels.shape)} in {files[f'{split}_labels']}."
            )
        check_labels(labels, NUM_CLASSES, files[f"{split}_labels"])
    as_images = lambda t: t.float().div_(255).unsqueeze(1)  # noqa: E731
    return (
        as_images(arrays["train_images"]),
        arrays["train_labels"].long(),
        as_images(arrays["test_images"]),
        arrays["test_labels"].long(),
    )
