"""A data set held as aligned tensors in memory, batched by fancy indexing, not per sample."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset

__all__ = ["TensorData", "collate_batch"]


class TensorData(Dataset):
    """Rows of aligned tensors (e.g. images and labels). ``__getitems__`` gathers a whole
    micro-batch with one indexing op per tensor instead of one call per sample."""

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors or any(len(t) != len(tensors[0]) for t in tensors):
            raise ValueError("TensorData needs tensors of one length")
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, index: int) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __getitems__(self, indices: Sequence[int]) -> tuple[Tensor, ...]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return tuple(t[idx] for t in self.tensors)


def collate_batch(batch):
    """The collate function for :class:`TensorData`: its ``__getitems__`` already made the batch."""
    return batch
