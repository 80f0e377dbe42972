"""What a trainer costs per step: the same model, data and steps through HF's plain ``Trainer``
(its default optimizer), ``DateTrainer(date=False)`` (the plan's optimizer alone),
``DateTrainer(date=True)`` (DATE's ratios over it), the bundled trainer (``date scale``'s, the
model as a recipe) and a hand-written loop (torch's fused AdamW, the same LR curve, clipping), on
two transformers built from configs: a GPT-2 (causal LM) and a BERT (masked LM), ~10 M parameters
each, one thread.

    OMP_NUM_THREADS=1 python -m benchmarks.trainer_overhead [--steps 40] [--repeats 3]
        [--out docs/results/bench/trainer_overhead.json]

Every (model, way) runs in a fresh process, the ways in turn (each round starting at another),
``--repeats`` rounds, so that a slow moment of a noisy machine hits all of them; each process
times every optimizer step after the first ``WARMUP`` (from one step's end to the next: data,
forward, backward, clipping, the optimizer and the scheduler) and the optimizer's step alone, and
reports their medians and its peak resident memory. The plan is
the baseline's own (batch 8 to batch 8, k = 1): every way trains the same schedule. The bundled
trainer runs with its defaults (metrics every 10 steps, a checkpoint at the end, a final
evaluation on 16 blocks): its steps are timed from one optimizer step's end to the next, as HF's.
The result per (model, way): the median over rounds of the median step, and its ratio to the
plain Trainer in the same round.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

BLOCK, BATCH, VOCAB, WARMUP = 128, 8, 96, 5
WAYS = ("hf", "date-base", "date", "bundled", "hand")
MODELS = ("gpt2", "bert")


def model_for(name: str):
    """A ~10 M-parameter GPT-2 or BERT from its config (no download), seeded."""
    from benchmarks.hf_adapter import model_for as built

    return built(name, VOCAB, seed=0, width=384, layers=6, heads=6, block=BLOCK)


class Blocks(torch.utils.data.Dataset):
    """Random token blocks (the time of a step does not depend on the text); for BERT, 15% of
    the positions are labels and the rest -100."""

    def __init__(self, masked: bool, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, VOCAB, (n, BLOCK), generator=g)
        self.labels = self.ids.clone()
        if masked:
            self.labels[torch.rand(self.ids.shape, generator=g) >= 0.15] = -100

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def _arguments(out: str, steps: int):
    import transformers

    return transformers.TrainingArguments(
        output_dir=out, per_device_train_batch_size=BATCH, max_steps=steps, learning_rate=1e-3,
        lr_scheduler_type="cosine", warmup_steps=max(1, steps // 10), weight_decay=0.1,
        max_grad_norm=1.0, use_cpu=True, report_to="none", save_strategy="no",
        logging_steps=10_000, disable_tqdm=True, seed=0, data_seed=0,
        dataloader_drop_last=True)


def one(model_name: str, way: str, steps: int) -> dict:
    """Train ``steps`` optimizer steps one way; the median step and the peak memory."""
    import transformers

    from date_engine import baseline_from_hf, plan_for
    from date_engine.integrations.hf import DateTrainer, training_arguments

    data = Blocks(model_name == "bert", BATCH * (steps + 1))
    model = model_for(model_name)
    times: list[float] = []
    stepping, ends = _time_optimizer_steps()

    class Clock(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        args = _arguments(out, steps)
        run = plan_for(baseline_from_hf(args, len(data)), batch=BATCH)
        if way == "hand":
            times = _hand_loop(model, data, run, steps)
        elif way == "bundled":
            _bundled(model_name, steps, Path(out))
            times = ends
        else:
            if way == "hf":
                trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
            else:
                trainer = DateTrainer(model=model, args=training_arguments(run, base=args),
                                      train_dataset=data, run=run, date=way == "date")
            trainer.add_callback(Clock())
            trainer.train()
    steps_s = [b - a for a, b in zip(times[WARMUP:], times[WARMUP + 1:])]
    return {"model": model_name, "way": way, "step_ms": 1e3 * statistics.median(steps_s),
            "optimizer_ms": 1e3 * statistics.median(stepping[WARMUP:]),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "parameters": sum(p.numel() for p in model.parameters()), "steps": steps}


def _recipe(name: str, samples: int):
    """The model and ``samples`` random blocks as a recipe of the bundled trainer (the loss HF's
    model computes; a final evaluation on 16 blocks)."""
    from date_engine.recipes import Recipe, RecipeData

    def loss(model, batch, data):
        return model(**batch).loss

    def evaluate(model, batch, data):
        return {"nll": model(**batch).loss * len(batch["input_ids"]),
                "count": len(batch["input_ids"])}

    return Recipe(
        name=f"{name}-blocks", model_name=f"{name} from its config", dataset_name="random blocks",
        metric_name="loss", higher_is_better=False, default_micro_batch=BATCH, dataset_size=None,
        build_model=lambda options: model_for(name),
        build_data=lambda data, options: RecipeData(Blocks(name == "bert", samples),
                                                    Blocks(name == "bert", 16)),
        loss=loss, evaluate=evaluate, metric=lambda stats: stats["nll"] / stats["count"])


def _bundled(model_name: str, steps: int, out: Path) -> None:
    """``date scale``'s trainer, in this process (``train_run``), on the model as a recipe
    registered here."""
    from date_engine import baseline, plan_for, train_run
    from date_engine.recipes import register_recipe
    from date_engine.spec import spec_with

    samples = BATCH * steps
    register_recipe(f"{model_name}-blocks")(lambda: _recipe(model_name, samples))
    spec = spec_with(baseline(recipe=f"{model_name}-blocks", batch_size=BATCH, lr=1e-3, epochs=1,
                              dataset_size=samples, warmup_epochs=0.1, optimizer="adamw",
                              weight_decay=0.1), ["train.grad_clip=1.0", "train.log_every=10"])
    with contextlib.redirect_stdout(io.StringIO()):
        train_run(spec, plan_for(spec, BATCH), out / "run")


def _time_optimizer_steps() -> tuple[list[float], list[float]]:
    """Seconds of every optimizer step from here on, and the moments each ended (the outermost
    torch optimizer's: DATE's, not the AdamW it steps inside), through torch's global step
    hooks."""
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    seconds: list[float] = []
    ends: list[float] = []
    inside: list[tuple[object, float]] = []

    def pre(optimizer, args, kwargs):
        if not inside:
            inside.append((optimizer, time.perf_counter()))

    def post(optimizer, args, kwargs):
        if inside and inside[0][0] is optimizer:
            ends.append(time.perf_counter())
            seconds.append(ends[-1] - inside.pop()[1])

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)
    return seconds, ends


def _hand_loop(model, data, run, steps: int) -> list[float]:
    """forward, backward, clipping, torch's fused AdamW and the plan's LR: nothing else."""
    from date_engine import scheduler_for

    decay = [p for p in model.parameters() if p.ndim > 1]
    rest = [p for p in model.parameters() if p.ndim <= 1]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": rest, "weight_decay": 0.0}], lr=run.plan.peak_lr,
                                  fused=True)
    scheduler = scheduler_for(optimizer, run)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True,
                                         generator=torch.Generator().manual_seed(0))
    model.train()
    times = []
    for _, batch in zip(range(steps), loader):
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter())
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps a run")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over every way")
    parser.add_argument("--out", default="trainer_overhead.json", help="where to write the JSON")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "WAY"), help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.one:
        torch.set_num_threads(1)
        print(json.dumps(one(*a.one, a.steps)))
        return
    rounds = []
    for r in range(a.repeats):
        for model_name in MODELS:
            row = {}
            for way in WAYS[r % len(WAYS):] + WAYS[:r % len(WAYS)]:  # each round another first
                done = subprocess.run([sys.executable, "-m", "benchmarks.trainer_overhead", "--one",
                                       model_name, way, "--steps", str(a.steps)],
                                      capture_output=True, text=True, check=True,
                                      env={**os.environ, "OMP_NUM_THREADS": "1"})
                row[way] = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"round {r + 1} {model_name:5} {way:10} {row[way]['step_ms']:8.1f} ms "
                      f"(optimizer {row[way]['optimizer_ms']:5.1f} ms) "
                      f"{row[way]['peak_rss_mib']:7.0f} MiB", flush=True)
            rounds.append(row)
    table = []
    for model_name in MODELS:
        mine = [row for row in rounds if row["hf"]["model"] == model_name]
        for way in WAYS:
            table.append({
                "model": model_name, "way": way,
                "parameters": mine[0][way]["parameters"],
                "step_ms": statistics.median(row[way]["step_ms"] for row in mine),
                "optimizer_ms": statistics.median(row[way]["optimizer_ms"] for row in mine),
                "vs_hf": statistics.median(row[way]["step_ms"] / row["hf"]["step_ms"]
                                           for row in mine),
                "peak_rss_mib": statistics.median(row[way]["peak_rss_mib"] for row in mine)})
    import transformers

    document = {"command": " ".join(["python -m benchmarks.trainer_overhead", *sys.argv[1:]]),
                "machine": platform.processor() or platform.machine(), "threads": 1,
                "torch": torch.__version__, "transformers": transformers.__version__,
                "repeats": a.repeats, "steps": a.steps, "rows": table, "rounds": rounds}
    Path(a.out).write_text(json.dumps(document, indent=1) + "\n")
    for row in table:
        print(f"{row['model']:5} {row['way']:10} {row['step_ms']:8.1f} ms "
              f"{row['vs_hf']:5.2f}× HF's Trainer  {row['peak_rss_mib']:6.0f} MiB")


if __name__ == "__main__":
    main()
