"""Does the time model hold here? `date plan --bench`'s forecast against what `date scale` measures.

    python benchmarks/time_model.py [--out /tmp/time-model] [--batches 256,512]

For lenet-mnist and lstm-mnist (1 epoch: benchmarks/*-1ep.yaml, MNIST in data/mnist) and
lenet-digits (as shipped) at 1 and 2 processes (gloo): `date bench --nproc P` before and after the
cells, and for each batch a whole `date scale` run logging every 5 steps, twice (at 2 processes
also the larger batch under ``--parallel fsdp``, in a table of its own, held to 30% as well).
The measured step time is the median over a run's log intervals (after the first) of Δ training
seconds / Δ steps; the measured run time is the training seconds at its last step (evaluations left
out, as the model leaves them out). The forecast is `date plan --json --bench`'s
``time.step_seconds`` and ``time.run_seconds`` (no overlap). Each side keeps the faster of its two:
on a shared VM the same command's time moves by up to 1.5× from one run to the next, and
interference only ever slows a run. Then the link: an all-reduce of a size the bench did not time
(3 MiB), timed on its own at 2 processes (the faster of two launches), against 2(N−1)α + 2(N−1)/N ·
bytes/β from lenet-mnist's 2-process benches (the faster of the two). Prints one table; exit 1 if a
ratio is outside [0.7, 1.3]. Run it on an idle machine: the bench and the runs must see the same
CPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from date_engine.machine import huge_pages_for_tensors

ROOT = Path(__file__).resolve().parents[1]
SPECS = {"lenet-mnist": ROOT / "benchmarks" / "lenet-mnist-1ep.yaml",
         "lstm-mnist": ROOT / "benchmarks" / "lstm-mnist-1ep.yaml",
         "lenet-digits": ROOT / "recipes" / "lenet-digits.yaml"}
"""lenet-digits as shipped (10 epochs of scikit-learn's digits: 57 steps at 256): a small model
whose step is mostly the trainer's own host work and the processes' synchronisation."""
SIZE = 3 << 20  # bytes of the all-reduce timed on its own


def date(*args: object) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "date_engine", *map(str, args)], cwd=ROOT,
                            capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"})
    if result.returncode:
        sys.exit(f"date {' '.join(map(str, args))} failed:\n{result.stdout}\n{result.stderr}")
    return result


def measured(run: Path) -> tuple[float, float]:
    """(median seconds per step between log lines after the first, training seconds at the
    end)."""
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [(r["step"], r["time_s"]) for r in lines if "loss" in r and "time_s" in r]
    per_step = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(steps[1:], steps[2:])]
    return statistics.median(per_step), steps[-1][1]


def allreduce_worker(size: int, repeats: int = 100) -> None:
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    buffer = torch.zeros(size // 4)
    for _ in range(5):
        dist.all_reduce(buffer)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dist.all_reduce(buffer)
        times.append(time.perf_counter() - start)
    box = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print(json.dumps({"seconds": float(box)}))
    dist.destroy_process_group()


def timed_allreduce() -> float:
    """The median seconds of a SIZE all-reduce at 2 processes, in a job of its own (threads and
    memory as a training process of a 2-process job has them)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    huge_pages_for_tensors(env)
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", "2", __file__, "--allreduce", str(SIZE)],
                         cwd=ROOT, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="time-model-")))
    parser.add_argument("--batches", default="256,512")
    args = parser.parse_args()
    if args.out.exists() and any(args.out.iterdir()):  # a run folder left there would resume
        sys.exit(f"--out {args.out}: not empty; give a new folder (a run left in it would resume "
                 "instead of training).")
    batches = [int(b) for b in args.batches.split(",")]
    rows, sharded, worst = [], [], 0.0
    for name, spec in SPECS.items():
        for nproc in (1, 2):
            benches = [args.out / f"bench-{name}-{nproc}-{i}" for i in (1, 2)]
            date("bench", spec, "--nproc", nproc, "-o", benches[0])
            cells = [(batch, "ddp") for batch in batches]
            cells += [(batches[-1], "fsdp")] if nproc == 2 else []
            runs = {}
            for batch, parallel in cells:
                for attempt in (1, 2):
                    run = args.out / f"run-{name}-{nproc}-{batch}-{parallel}-{attempt}"
                    date("scale", spec, "--batch", batch, "--nproc", nproc, "-o", run,
                         "--parallel", parallel, "--set", "train.log_every=5")
                    runs.setdefault((batch, parallel), []).append(measured(run))
            date("bench", spec, "--nproc", nproc, "-o", benches[1])
            for (batch, parallel), times in runs.items():
                step, total = min(t[0] for t in times), min(t[1] for t in times)
                forecasts = [json.loads(date(
                    "plan", spec, "--batch", batch, "--nproc", nproc, "--parallel", parallel,
                    "--bench", b / "bench.json", "--json").stdout)["time"] for b in benches]
                f_step = min(f["step_seconds"] for f in forecasts)
                f_total = min(f["run_seconds"] for f in forecasts)
                row = (name, nproc, batch, f_step, step, f_total, total)
                (sharded if parallel == "fsdp" else rows).append(row)
                worst = max(worst, abs(f_step / step - 1), abs(f_total / total - 1))
    # the link: each side keeps its faster, as the cells do (the two 2-process benches of
    # lenet-mnist; two separate launches of the timed all-reduce)
    links = [json.loads((args.out / f"bench-lenet-mnist-2-{i}" / "bench.json").read_text())
             ["link"] for i in (1, 2)]
    model, link = min(((2 * k["alpha"] + SIZE / k["beta"], k) for k in links),  # N = 2
                      key=lambda pair: pair[0])
    timed = min(timed_allreduce() for _ in range(2))
    worst = max(worst, abs(model / timed - 1))
    print("| recipe | processes | batch | step: forecast | measured | ratio | run: forecast | "
          "measured | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, nproc, batch, fs, s, ft, t in rows:
        print(f"| {name} | {nproc} | {batch} | {fs * 1e3:.1f} ms | {s * 1e3:.1f} ms | "
              f"{fs / s:.2f} | {ft:.1f} s | {t:.1f} s | {ft / t:.2f} |")
    print("\n--parallel fsdp (the sharded step as the bench timed it at 2 processes):\n")
    print("| recipe | processes | batch | step: forecast | measured | ratio | run: forecast | "
          "measured | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, nproc, batch, fs, s, ft, t in sharded:
        print(f"| {name} | {nproc} | {batch} | {fs * 1e3:.1f} ms | {s * 1e3:.1f} ms | "
              f"{fs / s:.2f} | {ft:.1f} s | {t:.1f} s | {ft / t:.2f} |")
    print(f"\nall-reduce of {SIZE / 2**20:.0f} MiB at 2 processes: model {model * 1e3:.2f} ms "
          f"(α = {link['alpha'] * 1e6:.1f} µs, β = {link['beta'] / 1e9:.2f} GB/s from the bench), "
          f"timed {timed * 1e3:.2f} ms, ratio {model / timed:.2f}")
    print(f"worst |ratio − 1|: {worst:.2f} ({'within' if worst <= 0.3 else 'outside'} 30%)")
    sys.exit(0 if worst <= 0.3 else 1)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--allreduce":
        allreduce_worker(int(sys.argv[2]))
    else:
        main()
