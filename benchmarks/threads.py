"""Threads that do not fight: the lenet-digits baseline's samples/s with the threads `date scale`
chooses, against one thread and against one per core, beside one busy process and on an idle
machine, side by side in one run.

    python benchmarks/threads.py [--steps 400] [--repeats 2] [--out docs/results/bench/threads.json]

Each arm is `date scale recipes/lenet-digits.yaml --batch 16 --max-steps N` in a fresh process,
the arms interleaved round after round (a slow moment of a noisy machine hits them all); a row is
the median of its repeats. "beside a busy process" starts `python -c "while True: pass"` first and
ends it after. Target (issue 55): the chosen threads beside a busy process within 1.2× of one
thread's samples/s (before: one thread per core, 46× slower there).
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

ROOT = Path(__file__).resolve().parent.parent
ARMS = {"chosen by date scale": None, "1 thread": "1",
        "1 per core": str(os.cpu_count() or 1)}


def samples_per_s(steps: int, threads: str | None) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [sys.executable, "-m", "date_engine", "scale", str(ROOT / "recipes/lenet-digits.yaml"),
             "--batch", "16", "--max-steps", str(steps), "--set", "train.log_every=100",
             "--set", "train.eval_every=100000", "-o", f"{folder}/run", "--json"],
            env=env, capture_output=True, text=True, check=True, timeout=1800)
    return json.loads(done.stdout)["summary"]["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "docs/results/bench/threads.json"))
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    for setting in ("idle", "beside a busy process"):
        rows = results[setting] = {arm: [] for arm in ARMS}
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) \
            if setting != "idle" else None
        try:
            for _ in range(args.repeats):
                for arm, threads in ARMS.items():
                    rows[arm].append(samples_per_s(args.steps, threads))
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
    table = {setting: {arm: statistics.median(v) for arm, v in rows.items()}
             for setting, rows in results.items()}
    busy = table["beside a busy process"]
    ratio = busy["1 thread"] / busy["chosen by date scale"]
    for setting, rows in table.items():
        print(f"{setting}: " + ", ".join(f"{arm} {v:,.0f} samples/s" for arm, v in rows.items()))
    print(f"beside a busy process, 1 thread ÷ chosen: {ratio:.2f}× (target ≤ 1.2×: "
          f"{'met' if ratio <= 1.2 else 'MISSED'})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "command": "python benchmarks/threads.py " + " ".join(sys.argv[1:]),
        "cores": os.cpu_count(), "steps": args.steps, "repeats": args.repeats,
        "samples_per_s": results, "median": table, "busy_ratio": ratio}, indent=2) + "\n")


if __name__ == "__main__":
    main()
