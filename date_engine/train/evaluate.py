"""The recipe's metric over the whole evaluation set, shared out over the processes."""

from __future__ import annotations

import torch
import torch.distributed as dist

from date_engine.recipes import Recipe, RecipeData
from date_engine.train.reporting import RunLogger
from date_engine.train.runtime import Runtime
from date_engine.train.step import to_device

__all__ = ["evaluate"]

EVAL_BATCH = 256


@torch.no_grad()
def evaluate(rt: Runtime, recipe: Recipe, model: torch.nn.Module, data: RecipeData, step: int,
             log: RunLogger) -> float:
    """Every process scores its share of ``data.eval`` (sample i goes to rank i mod world); the
    recipe's sums are added over the processes (float64) and turned into its metric and details,
    logged at ``step``. Leaves the model in training mode. Under fsdp each forward gathers every
    process's shards, so a process with fewer evaluation batches runs as many forwards as the
    others (their statistics dropped)."""
    with log.evaluating(step, recipe.metric_name) as result:
        model.eval()
        shard = list(range(rt.rank, len(data.eval), rt.world_size))
        loader = torch.utils.data.DataLoader(
            data.eval,
            batch_sampler=torch.utils.data.BatchSampler(shard, EVAL_BATCH, drop_last=False),
            collate_fn=data.collate,
            generator=torch.Generator().manual_seed(0),
        )
        totals: dict[str, float] = {}
        for batch in loader:
            with rt.autocast():
                stats = recipe.evaluate(model, to_device(batch, rt.device), data)
            for key, value in stats.items():
                totals[key] = totals.get(key, 0.0) + float(value)
        if rt.sharded:  # every forward gathers parameters from all: each process runs as many
            share = -(-len(data.eval) // rt.world_size)  # rank 0's, the largest
            most = -(-share // EVAL_BATCH)
            for _ in range(most - len(loader)):  # its extra forwards' statistics are dropped
                one = (data.collate or torch.utils.data.default_collate)([data.eval[0]])
                recipe.evaluate(model, to_device(one, rt.device), data)
        if rt.distributed:
            keys = sorted(totals)
            values = torch.tensor([totals[k] for k in keys], dtype=torch.float64, device=rt.device)
            dist.all_reduce(values)
            totals = dict(zip(keys, values.tolist()))
        model.train()
        result[recipe.metric_name] = recipe.metric(totals)
        if recipe.details is not None:
            result.update(recipe.details(totals))
    return result[recipe.metric_name]
