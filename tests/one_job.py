"""Several `date scale` runs in one job (``python -m tests.one_job OUT RUNS``), one after the other
through the CLI, so torch is imported once instead of once per run. RUNS is a JSON file of
``{name: [argument, ...]}``, each list the arguments of one `date scale` (spec first).

Alone, each run trains in this process, as `date scale` runs a one-process job. Started by
torchrun (``torchrun --nproc-per-node 2 -m tests.one_job ...``), each run gets ``--nproc`` of
torchrun's world size and joins the job torchrun started, as `date scale` does inside one; every
process then trains every run, one process group after another. Each process writes one JSON line
per run to OUT/records-<rank>.jsonl: its name, exit code, stdout and stderr (and the exception, if
the command raised one). `tests.runs.in_one_job` starts such a job and reads the records back.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from typer.testing import CliRunner

from date_engine.cli import app


def main(out: Path, runs: dict[str, list[str]]) -> None:
    runner = CliRunner()
    nproc, rank = os.environ.get("WORLD_SIZE", "1"), os.environ.get("RANK", "0")
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"records-{rank}.jsonl").open("w") as records:
        for name, args in runs.items():
            result = runner.invoke(app, ["scale", *args, "--nproc", nproc],
                                   env={"COLUMNS": "120"})
            error = "" if result.exception is None or isinstance(result.exception, SystemExit) \
                else repr(result.exception)
            records.write(json.dumps({"run": name, "exit_code": result.exit_code,
                                      "stdout": result.stdout,
                                      "stderr": result.stderr + error}) + "\n")
            records.flush()


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()))
