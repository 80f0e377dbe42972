"""What measuring the gradient noise scale costs: in every step, and as a probe.

    OMP_NUM_THREADS=1 python benchmarks/noise_overhead.py [--spec recipes/lenet-digits.yaml]
        [--batch 256] [--micro-batch 64] [--repeats 5] [--probe] [--hooks]

Step cost: `date scale` at --batch split into --micro-batch (so that every step sees several
micro-batch gradients), with the measurement on and off (RunConfig.measure_noise), runs
alternating, `--repeats` each; medians of samples/s compared (target: <= 2% slower).

--hooks times what the measurement adds to a micro-batch's backward pass alone: the spec's
model, forward and backward on a real micro-batch of --micro-batch samples, with and without
the trainer's per-parameter hook (train.step.squared_norm_hook), 40 interleaved rounds of 50.
Whole runs scatter by more than the hooks cost on a small model; this isolates them.

--probe also times the baseline's whole training (its batch, one pass per step) against `date
probe` with its defaults (DEFAULT_SHARE of its steps, each split into two micro-batches),
alternating, `--repeats` each (target: <= 10% of the baseline's time).
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

from date_engine import load_spec
from date_engine.probe import DEFAULT_SHARE
from date_engine.recipes import DataOptions, get_recipe
from date_engine.train.config import RunConfig
from date_engine.train.probe import ProbeOptions, run_probe
from date_engine.train.step import squared_norm_hook
from date_engine.train.trainer import run


def timed_run(spec_path: str, batch: int, micro_batch: int | None, measure: bool) -> dict:
    """One `date scale` run in this process; its summary.json (samples/s, wall time)."""
    spec = load_spec(spec_path)
    with tempfile.TemporaryDirectory() as out:
        config = RunConfig(
            spec=spec.model_dump(mode="json", exclude_none=True), spec_path=spec_path,
            recipe=spec.recipe, batch=batch, world_size=1, micro_batch=micro_batch,
            output_dir=str(Path(out) / "run"), measure_noise=measure)
        with contextlib.redirect_stdout(io.StringIO()):
            assert run(config) == 0
        return json.loads((Path(out) / "run" / "summary.json").read_text())


def probe_seconds(spec_path: str) -> tuple[float, float]:
    """One `date probe` with its defaults: its training time, and its whole time (start-up and
    fit included)."""
    spec = load_spec(spec_path)
    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        probe, code = run_probe(Path(spec_path), spec, get_recipe(spec.recipe), ProbeOptions(),
                                Path(out) / "probe")
        assert code == 0 and probe is not None
        return probe.wall_seconds, time.perf_counter() - start


def hook_cost(spec_path: str, micro_batch: int, rounds: int = 40, passes: int = 50) -> None:
    """Microseconds per forward + backward of one micro-batch, with and without the hooks."""
    spec = load_spec(spec_path)
    recipe = get_recipe(spec.recipe)
    options = recipe.parse_options(spec.model)
    torch.manual_seed(0)
    model = recipe.build_model(options)
    data = recipe.build_data(DataOptions(data_dir=spec.train.data_dir, seed=0), options)
    batch = next(iter(torch.utils.data.DataLoader(data.train, batch_size=micro_batch,
                                                  collate_fn=data.collate)))
    add = squared_norm_hook(torch.zeros(()))  # the trainer's hook, on its own accumulator

    def timed(hooked: bool) -> float:
        handles = [p.register_hook(add) for p in model.parameters()
                   if p.requires_grad] if hooked else []
        start = time.perf_counter()
        for _ in range(passes):
            recipe.loss(model, batch, data).backward()
        for handle in handles:
            handle.remove()
        return (time.perf_counter() - start) / passes * 1e6

    plain, hooked = [], []
    for _ in range(rounds):
        plain.append(timed(False))
        hooked.append(timed(True))
    tensors = sum(p.requires_grad for p in model.parameters())
    p, h = statistics.median(plain), statistics.median(hooked)
    print(f"{spec_path}: forward + backward of {micro_batch} samples, {tensors} tensors, "
          f"{rounds} rounds of {passes}, {torch.get_num_threads()} threads")
    print(f"without hooks: {p:8.1f} us\nwith hooks   : {h:8.1f} us  (+{h - p:.1f} us, "
          f"{(h - p) / tensors:.1f} us per tensor, {100 * (h - p) / p:+.1f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", default="recipes/lenet-digits.yaml")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--hooks", action="store_true")
    args = parser.parse_args()
    if args.hooks:
        hook_cost(args.spec, args.micro_batch)
        return
    on, off = [], []
    for _ in range(args.repeats):
        on.append(timed_run(args.spec, args.batch, args.micro_batch, True)["samples_per_s"])
        off.append(timed_run(args.spec, args.batch, args.micro_batch, False)["samples_per_s"])
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(f"{args.spec}, batch {args.batch} in micro-batches of {args.micro_batch}, "
          f"{args.repeats} runs each, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"measured     : {m_on:9.0f} samples/s  ({', '.join(f'{x:.0f}' for x in on)})")
    print(f"not measured : {m_off:9.0f} samples/s  ({', '.join(f'{x:.0f}' for x in off)})")
    print(f"overhead     : {100 * (m_off - m_on) / m_off:+.1f}%  (target <= 2%)")
    if not args.probe:
        return
    spec = load_spec(args.spec)
    base, probes = [], []
    for _ in range(args.repeats):
        base.append(timed_run(args.spec, spec.baseline.batch_size, None, False)["wall_time_s"])
        probes.append(probe_seconds(args.spec))
    b = statistics.median(base)
    p, whole = (statistics.median(x) for x in zip(*probes))
    print(f"baseline     : {b:7.1f} s training  ({', '.join(f'{x:.1f}' for x in base)})")
    print(f"probe ({DEFAULT_SHARE:.0%}) : {p:7.1f} s training = {100 * p / b:.1f}% of the "
          f"baseline (target <= 10%); {whole:.1f} s with start-up and fit")


if __name__ == "__main__":
    main()
