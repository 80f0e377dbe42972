"""CI's dry runs of several specs in one job (``python -m tests.dry_runs OUT SPEC[@BATCH]...``):
`date scale SPEC --batch BATCH --nproc N --dry-run --json -o OUT/<i>` (BATCH by default the
spec's B0) through the CLI, one after the other, so torch is imported once instead of once per run.

Alone, N is 1 and each run trains in this process, as `date scale` runs a one-process job. Started
by torchrun (``torchrun --nproc-per-node 2 -m tests.dry_runs ...``), N is torchrun's world size and
each run joins the job torchrun started, as `date scale` does inside one; every process then trains
every run, one process group after another. Each process writes one JSON line per run to
OUT/records-<rank>.jsonl: its exit code, stdout and stderr, and whether its folder was left behind.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from typer.testing import CliRunner

from date_engine import load_spec
from date_engine.cli import app


def main(out: Path, runs: list[str]) -> None:
    runner = CliRunner()
    nproc, rank = os.environ.get("WORLD_SIZE", "1"), os.environ.get("RANK", "0")
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"records-{rank}.jsonl").open("w") as records:
        for i, run in enumerate(runs):
            folder = out / str(i)
            path, _, size = run.partition("@")
            batch = int(size) if size else load_spec(path).baseline.batch_size
            result = runner.invoke(app, ["scale", path, "--batch", str(batch), "--nproc", nproc,
                                         "--dry-run", "--json", "-o", str(folder)],
                                   env={"COLUMNS": "120"})
            error = "" if result.exception is None or isinstance(result.exception, SystemExit) \
                else repr(result.exception)
            records.write(json.dumps({"run": run, "exit_code": result.exit_code,
                                      "stdout": result.stdout, "stderr": result.stderr + error,
                                      "left": folder.exists()}) + "\n")
            records.flush()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
