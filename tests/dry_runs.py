"""CI's one-process dry runs of several specs in one interpreter (``python -m tests.dry_runs OUT
SPEC[@BATCH]...``): `date scale SPEC --batch BATCH --nproc 1 --dry-run --json -o OUT/<i>` (BATCH
by default the spec's B0) through the CLI, one after the other, as `date scale` runs a one-process
job (in its own process, no agent); torch is imported once instead of once per run. Prints one
JSON line per run: its exit code, stdout and stderr, and whether its folder was left behind."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from date_engine import load_spec
from date_engine.cli import app


def main(out: Path, runs: list[str]) -> None:
    runner = CliRunner()
    for i, run in enumerate(runs):
        folder = out / str(i)
        path, _, size = run.partition("@")
        batch = int(size) if size else load_spec(path).baseline.batch_size
        result = runner.invoke(app, ["scale", path, "--batch", str(batch), "--nproc", "1",
                                     "--dry-run", "--json", "-o", str(folder)],
                               env={"COLUMNS": "120"})
        error = "" if result.exception is None or isinstance(result.exception, SystemExit) \
            else repr(result.exception)
        print(json.dumps({"run": run, "exit_code": result.exit_code, "stdout": result.stdout,
                          "stderr": result.stderr + error, "left": folder.exists()}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
