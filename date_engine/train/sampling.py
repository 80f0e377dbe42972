"""Which samples each process reads, micro-batch after micro-batch, resumable at any step.

The run reads one global stream: epoch after epoch, the data set shuffled with ``seed + epoch``
(torch's ``randperm``, as ``DistributedSampler`` shuffles), every sample once per epoch and none
dropped. A step's global batch is the stream's next ``batch`` samples; of each micro-batch round
(``micro_batch · world_size`` samples) process ``rank`` reads positions ``rank, rank + world_size,
...`` (``DistributedSampler``'s interleaving). So the samples of a step are the same whatever the
split into processes and accumulation steps, across epochs too (an epoch that does not divide over
the processes does not change where the next begins: resharding a run to another number of
processes keeps its trajectory), and the position to resume from is a function of the step: the
samples the plan has read by then. A micro-batch may straddle two epochs. A batch ramp changes
the micro-batch from one stage to the next (``then``); the stream goes on where it was, so no
sample is skipped or repeated at a change.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler

__all__ = ["MicroBatchSampler", "loader"]


class MicroBatchSampler(Sampler[list[int]]):
    """Yields this process's micro-batches (lists of dataset indices), starting ``start`` samples
    into the global stream, ``count`` of them."""

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

    def __len__(self) -> int:
        return sum(count for _, count in self.sizes)

    def epoch_indices(self, epoch: int) -> list[int]:
        """The data set in epoch ``epoch``'s order (the whole stream's, every process's)."""
        generator = torch.Generator()
        generator.manual_seed(self.seed + epoch)
        return torch.randperm(self.dataset_size, generator=generator).tolist()

    def __iter__(self) -> Iterator[list[int]]:
        n, world = self.dataset_size, self.world_size
        position, order, epoch = self.start + self.rank, [], -1
        for micro, count in self.sizes:
            for _ in range(count):
                batch: list[int] = []
                while len(batch) < micro:  # a slice of each epoch the micro-batch reaches
                    if position // n != epoch:
                        epoch = position // n
                        order = self.epoch_indices(epoch)
                    offset = position % n
                    take = min(micro - len(batch), -(-(n - offset) // world))
                    batch += order[offset:offset + take * world:world]
                    position += take * world
                yield batch


def loader(data, run, rank: int, seed: int, start: int, stop_at: int, num_workers: int,
           pin_memory: bool, worker_seed: int):
    """This process's micro-batches of ``data.train`` for steps start+1 .. stop_at of the run
    stepping as ``run`` (a :class:`~date_engine.runplan.RunPlan`), resumable at any step (a
    ramp's stages one after the other); ``worker_seed`` seeds the loader's workers."""
    import torch

    sizes = run.stream(start, stop_at)
    first = sizes[0] if sizes else (run.step_split.micro_batch, 0)
    world = run.split.world_size
    sampler = MicroBatchSampler(len(data.train), first[0], world, rank, seed,
                                start=run.samples_through(start), count=first[1],
                                then=sizes[1:])
    return torch.utils.data.DataLoader(
        data.train, batch_sampler=sampler, collate_fn=data.collate, num_workers=num_workers,
        pin_memory=pin_memory, generator=torch.Generator().manual_seed(worker_seed))
