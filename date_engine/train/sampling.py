"""Which samples each process reads, micro-batch after micro-batch, resumable at any step.

Every epoch, torch's ``DistributedSampler`` shuffles the data set with ``seed + epoch`` and gives
each process every ``world_size``-th sample (dropping the remainder, so no sample repeats). A
process reads its share as one stream across epochs, ``micro_batch`` samples at a time; a
micro-batch may straddle two epochs. So after ``s`` optimizer steps each process has read exactly
``s · micro_batch · accumulation_steps`` samples of its stream: the position to resume from is a
function of the step, and the global batch of a step is the same set of samples whatever the split
into processes and accumulation steps. A batch ramp changes the micro-batch from one stage to the
next (``then``); the stream goes on where it was, so no sample is skipped or repeated at a change.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from torch.utils.data import DistributedSampler, Sampler

__all__ = ["MicroBatchSampler", "loader"]


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
        then: Sequence[tuple[int, int]] = (),
    ) -> None:
        if dataset_size < world_size:
            raise ValueError(f"{dataset_size} samples cannot be shared by {world_size} processes")
        self.dataset_size, self.start = dataset_size, start
        self.world_size, self.rank, self.seed = world_size, rank, seed
        self.sizes = [(micro_batch, count), *then]
        """(micro-batch, how many) in order: ``then`` continues the stream after the first
        ``count`` with other micro-batch sizes (a batch ramp's stages)."""
        self.per_epoch = dataset_size // world_size

    def __len__(self) -> int:
        return sum(count for _, count in self.sizes)

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
        for micro, count in self.sizes:
            for _ in range(count):
                while len(pending) < micro:
                    pending += self.epoch_indices(epoch)[offset:]
                    epoch, offset = epoch + 1, 0
                yield pending[:micro]
                pending = pending[micro:]


def loader(data, planned, rank: int, seed: int, start: int, stop_at: int, num_workers: int,
           pin_memory: bool, worker_seed: int):
    """This process's micro-batches of ``data.train`` for steps start+1 .. stop_at of the run
    stepping as ``planned`` (a :class:`~date_engine.runplan.RunPlan`), resumable at any step (a
    ramp's stages one after the other); ``worker_seed`` seeds the loader's workers."""
    import torch

    sizes = planned.stream(start, stop_at)
    first = sizes[0] if sizes else (planned.split.micro_batch, 0)
    world = planned.split.world_size
    sampler = MicroBatchSampler(len(data.train), first[0], world, rank, seed,
                                start=planned.samples_through(start) // world, count=first[1],
                                then=sizes[1:])
    return torch.utils.data.DataLoader(
        data.train, batch_sampler=sampler, collate_fn=data.collate, num_workers=num_workers,
        pin_memory=pin_memory, generator=torch.Generator().manual_seed(worker_seed))
