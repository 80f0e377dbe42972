"""``train.micro_batch: auto``: the largest per-process micro-batch that fits the device, found at
the start of a run by trying it.

Each candidate — a process's whole share of the step's batch, then the largest divisor of the
share at or below half the last (:func:`~date_engine.runplan.halvings`) — gets one forward and
backward pass of the run's model on as many real samples; ``torch.OutOfMemoryError`` moves to the
next, with the allocator emptied in between. The processes of a job take the smallest of their
choices. The accumulation steps follow from it, so the global batch stays the plan's exactly; the
choice goes to the run folder's micro_batch.json and a resumed or restarted run keeps it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from date_engine.errors import DateError
from date_engine.runfolder import RunFolder
from date_engine.runplan import halvings
from date_engine.train.runtime import Runtime
from date_engine.train.step import to_device

__all__ = ["choose_micro_batch", "largest_that_fits", "wanted", "with_micro_batch"]


def largest_that_fits(recipe: Any, options: Any, data: Any, rt: Runtime, share: int
                      ) -> tuple[int, list[int]]:
    """(the largest micro-batch of ``share``'s halvings whose forward and backward pass fits
    this process's device, the sizes tried in order)."""
    tried: list[int] = []
    model = recipe.build_model(options).to(rt.device)
    try:
        for size in halvings(share):
            tried.append(size)
            if _fits(model, recipe, data, rt, size):
                return size, tried
    finally:
        del model
        rt.release_memory()
    raise DateError(f"not even one sample per pass fits {rt.device} beside the model (tried "
                    f"{', '.join(map(str, tried))}); train on a device with more memory, or "
                    "shard the model with --parallel fsdp.")


def _fits(model: torch.nn.Module, recipe: Any, data: Any, rt: Runtime, size: int) -> bool:
    loader = torch.utils.data.DataLoader(data.train, batch_size=size, shuffle=False,
                                         collate_fn=data.collate)
    try:
        batch = to_device(next(iter(loader)), rt.device)
        with rt.autocast():
            loss = recipe.loss(model, batch, data)
        loss.backward()
        return True
    except torch.OutOfMemoryError:
        return False
    finally:
        model.zero_grad(set_to_none=True)
        batch = loss = None
        rt.release_memory()


def wanted(spec: Any, config: Any) -> bool:
    """Whether this run looks for its micro-batch: ``train.micro_batch: auto``, no
    ``--micro-batch`` given, and no dry run (which steps with its own tiny split)."""
    return spec.train.micro_batch == "auto" and not (config.micro_batch or config.dry_run)


def with_micro_batch(run: Any, recipe: Any, options: Any, data: Any, rt: Runtime,
                     folder: RunFolder, again: bool, console: Any) -> Any:
    """``run`` (a :class:`~date_engine.runplan.RunPlan`) split into the micro-batch
    :func:`choose_micro_batch` chose, the plan unchanged; the line saying which is printed on
    ``console``. ``again``: a resumed or restarted run."""
    from date_engine.view.console import note_line

    chosen, line = choose_micro_batch(recipe, options, data, rt,
                                      run.plan.target_batch // run.split.world_size, folder,
                                      again)
    console.print(note_line(line), soft_wrap=True)
    return run.with_micro_batch(chosen)


def choose_micro_batch(recipe: Any, options: Any, data: Any, rt: Runtime, share: int,
                       folder: RunFolder, again: bool) -> tuple[int, str]:
    """The micro-batch of a ``train.micro_batch: auto`` run of ``share`` samples per process per
    step, and the line that says how it was chosen. ``again``: a resumed or restarted run, which
    keeps the choice in ``folder`` when there is one."""
    kept = folder.read_micro_batch() if again else None
    if kept is not None and share % kept == 0:
        return kept, (f"micro-batch {kept} (train.micro_batch: auto), as this run chose before "
                      f"({folder.micro_batch_path.name}).")
    chosen, tried = largest_that_fits(recipe, options, data, rt, share)
    if rt.distributed:  # every process passes the same size: the smallest that fits them all
        agreed = torch.tensor([chosen], device=rt.device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
        chosen = int(agreed.item())
    if rt.is_main:
        folder.write_micro_batch(chosen, tried, str(rt.device))
    return chosen, (f"micro-batch {chosen} (train.micro_batch: auto): the largest that fit "
                    f"{rt.device} of {', '.join(map(str, tried))} tried; "
                    f"{share // chosen} accumulation step(s) keep the batch.")
