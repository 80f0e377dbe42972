"""What huge pages under large CPU tensors do to a training step (date_engine.machine.
huge_pages_for_tensors, on by default where the kernel allows them).

    python benchmarks/huge_pages.py [--repeats 3] [--steps 60]

For lenet-mnist (one process at 512, two at 512) and lstm-mnist (one process at 256), 1-epoch
specs of benchmarks/ (MNIST in data/mnist): `date scale --max-steps --steps`, logging every 5
steps, with THP_MEM_ALLOC_ENABLE=0 and =1, the two runs of each repeat one after the other. The
step time is a run's median over its log intervals after the first (benchmarks/time_model.py's
measure); each cell compares the medians of its repeats. Exit 1 if huge pages make any cell more
than 10% slower. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from time_model import ROOT, SPECS, measured

CELLS = (("lenet-mnist", 1, 512), ("lstm-mnist", 1, 256), ("lenet-mnist", 2, 512))


def step_seconds(recipe: str, nproc: int, batch: int, huge: bool, steps: int, out: Path) -> float:
    """The median step time of one `date scale` run with huge pages on or off."""
    env = {**os.environ, "THP_MEM_ALLOC_ENABLE": "1" if huge else "0"}
    result = subprocess.run(
        [sys.executable, "-m", "date_engine", "scale", str(SPECS[recipe]), "--batch", str(batch),
         "--nproc", str(nproc), "--max-steps", str(steps), "--set", "train.log_every=5",
         "-o", str(out)], cwd=ROOT, capture_output=True, text=True, env=env)
    if result.returncode:
        sys.exit(f"date scale failed:\n{result.stdout}\n{result.stderr}")
    return measured(out)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    print("| recipe | processes | batch | 4 KiB pages | huge pages | speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    worst = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for recipe, nproc, batch in CELLS:
            times = {False: [], True: []}
            for i in range(args.repeats):
                for huge in (False, True):
                    out = Path(tmp) / f"{recipe}-{nproc}-{batch}-{int(huge)}-{i}"
                    times[huge].append(step_seconds(recipe, nproc, batch, huge, args.steps, out))
            off, on = statistics.median(times[False]), statistics.median(times[True])
            worst = min(worst, off / on)
            print(f"| {recipe} | {nproc} | {batch} | {off * 1e3:.1f} ms | {on * 1e3:.1f} ms | "
                  f"{off / on:.2f}× |")
    print(f"\n{args.repeats} runs of {args.steps} steps per cell and setting; slowest cell "
          f"{worst:.2f}× (exit 1 below 0.90×)")
    sys.exit(0 if worst >= 0.9 else 1)


if __name__ == "__main__":
    main()
