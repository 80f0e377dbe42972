"""Samples/s of `date scale` against a minimal hand-written torch loop doing the same steps.

    OMP_NUM_THREADS=1 python benchmarks/loop_overhead.py [--spec recipes/lenet-digits.yaml]
        [--batch 256] [--repeats 5]

Both train the same model on the same data with the same micro-batch, DATE optimizer and schedule,
for the plan's steps, in this one process. The trainer runs with its defaults (progress, metrics
every 10 steps, checkpoints every tenth of the run, final evaluation); the hand loop does forward,
backward, step and nothing else. Runs alternate, `--repeats` times each; medians are compared.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from date_engine import load_spec
from date_engine.optim.build import build_optimizer
from date_engine.planning import plan_for
from date_engine.recipes import DataOptions, get_recipe
from date_engine.schedule import set_lr
from date_engine.train.config import RunConfig
from date_engine.train.trainer import run


def hand_loop(spec, recipe, plan, split) -> float:
    """The minimal loop: samples/s over the same number of steps."""
    torch.manual_seed(0)
    options = recipe.parse_options(spec.model)
    data = recipe.build_data(DataOptions(), options)
    model = recipe.build_model(options)
    opt = build_optimizer(model.named_parameters(), plan.optimizer, plan.peak_lr)
    loader = torch.utils.data.DataLoader(data.train, batch_size=split.micro_batch, shuffle=True,
                                         drop_last=True, collate_fn=data.collate)
    start, step = time.perf_counter(), 0
    while step < plan.total_iterations:
        for x, y in loader:
            step += 1
            set_lr(opt, plan, step)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == plan.total_iterations:
                break
    return step * plan.target_batch / (time.perf_counter() - start)


def trainer_run(spec_path: str, recipe_name: str, batch: int) -> float:
    spec = load_spec(spec_path)
    with tempfile.TemporaryDirectory() as out:
        config = RunConfig(
            spec=spec.model_dump(mode="json", exclude_none=True),
            spec_path=spec_path,
            recipe=recipe_name,
            batch=batch,
            world_size=1,
            micro_batch=None,
            output_dir=str(Path(out) / "run"),
        )
        with contextlib.redirect_stdout(io.StringIO()):  # the plan and summary of every run
            assert run(config) == 0
        return json.loads((Path(out) / "run" / "summary.json").read_text())["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", default="recipes/lenet-digits.yaml")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    spec = load_spec(args.spec)
    recipe = get_recipe(spec.recipe)
    plan, split = plan_for(spec, args.batch, recipe=recipe)
    hand, trainer = [], []
    for _ in range(args.repeats):
        hand.append(hand_loop(spec, recipe, plan, split))
        trainer.append(trainer_run(args.spec, spec.recipe, args.batch))
    h, t = statistics.median(hand), statistics.median(trainer)
    print(
        f"{recipe.name}, batch {split.batch} = {split.micro_batch} × 1 × "
        f"{split.accumulation_steps}, {plan.total_iterations} steps, {args.repeats} runs each, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"hand-written loop : {h:9.0f} samples/s  ({', '.join(f'{x:.0f}' for x in hand)})")
    print(f"date scale        : {t:9.0f} samples/s  ({', '.join(f'{x:.0f}' for x in trainer)})")
    print(f"overhead          : {100 * (h - t) / h:+.1f}%  (target <= 5%)")


if __name__ == "__main__":
    main()
