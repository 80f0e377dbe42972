"""Which samples each process reads, micro-batch after micro-batch, resumable at any step.

Every epoch, torch's ``DistributedSampler`` shuffles the data set with ``seed + epoch`` and gives
each process every ``world_size``-th sample (dropping the remainder, so no sample repeats). A
process reads its share as one stream across epochs, ``micro_batch`` samples at a time; a
micro-batch may straddle two epochs. So after ``s`` optimizer steps each process has read exactly
``s · micro_batch · accumulation_steps`` samples of its stream: the position to resume from is a
function of the step, and the global batch of a step is the same set of samples whatever the split
into processes and accumulation steps.
"""

from __future__ import annotations

from collections.abc import Iterator

from torch.utils.data import DistributedSampler, Sampler

__all__ = ["MicroBatchSampler"]


class _Length:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


class MicroBatchSampler(Sampler[list[int]]):
    """Yields this process's micro-batches (lists of dataset indices), starting at ``start``
    samples into its stream, ``count`` of them."""

    def __init__(
        self,
        dataset_size: int,
        micro_batch: int,
        world_size: int,
        rank: int,
        seed: int,
        start: int,
        count: int,
    ) -> None:
        if dataset_size < world_size:
            raise ValueError(f"{dataset_size} samples cannot be shared by {world_size} processes")
        self.dataset_size, self.micro_batch = dataset_size, micro_batch
        self.world_size, self.rank, self.seed = world_size, rank, seed
        self.start, self.count = start, count
        self.per_epoch = dataset_size // world_size

    def __len__(self) -> int:
        return self.count

    def epoch_indices(self, epoch: int) -> list[int]:
        sampler = DistributedSampler(
            _Length(self.dataset_size),
            num_replicas=self.world_size,
            rank=self.rank,
            shuffle=True,
            seed=self.seed,
            drop_last=True,
        )
        sampler.set_epoch(epoch)
        return list(sampler)

    def __iter__(self) -> Iterator[list[int]]:
        epoch, offset = divmod(self.start, self.per_epoch)
        pending: list[int] = []
        produced = 0
        while produced < self.count:
            pending += self.epoch_indices(epoch)[offset:]
            epoch, offset = epoch + 1, 0
            while len(pending) >= self.micro_batch and produced < self.count:
                yield pending[: self.micro_batch]
                pending = pending[self.micro_batch :]
                produced += 1
