"""CI's one-process dry runs of several specs in one interpreter (``python -m tests.dry_runs OUT
SPEC...``): `date scale SPEC --batch B0 --nproc 1 --dry-run --json -o OUT/<i>` through the CLI,
one after the other, as `date scale` runs a one-process job (in its own process, no agent); torch
is imported once instead of once per recipe. Prints one JSON line per spec: its exit code, stdout
and stderr, and whether the output folder was left behind."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from date_engine import load_spec
from date_engine.cli import app


def main(out: Path, specs: list[str]) -> None:
    runner = CliRunner()
    for i, path in enumerate(specs):
        folder = out / str(i)
        batch = load_spec(path).baseline.batch_size
        result = runner.invoke(app, ["scale", path, "--batch", str(batch), "--nproc", "1",
                                     "--dry-run", "--json", "-o", str(folder)],
                               env={"COLUMNS": "120"})
        error = "" if result.exception is None or isinstance(result.exception, SystemExit) \
            else repr(result.exception)
        print(json.dumps({"spec": path, "exit_code": result.exit_code, "stdout": result.stdout,
                          "stderr": result.stderr + error, "left": folder.exists()}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
