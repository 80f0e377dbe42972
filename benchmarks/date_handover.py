"""What `date +%s` costs inside a virtualenv where `date` is date_engine's console script, against
a bare Python start-up and the system's date, side by side.

    python benchmarks/date_handover.py [--runs 30]

Each command runs --runs times, the three alternating; the medians and the ratio to `python -c
pass` are printed (the console script can cost no less than one Python start-up, as it is one).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    script = Path(sys.executable).parent / "date"
    system = shutil.which("date", path="/bin:/usr/bin")
    commands = {"python -c pass": [sys.executable, "-c", "pass"],
                "date +%s (console script)": [str(script), "+%s"],
                f"{system} +%s": [system, "+%s"]}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, cmd in commands.items():
            began = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - began)
    base = statistics.median(times["python -c pass"])
    print(f"{args.runs} runs each, alternating; medians")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:28s} {1e3 * median:7.1f} ms  {median / base:5.2f}× python -c pass")


if __name__ == "__main__":
    main()
