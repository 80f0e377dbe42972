"""Running `date` as a user would, from the tests: in its own process group, killed on timeout;
and reading what a run wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.bounds import hang_limit
from tests.conftest import RECIPES, ROOT

SPEC = str(RECIPES / "lenet-digits.yaml")
SHORT = ["--set", "baseline.epochs=10", "--set", "baseline.warmup_epochs=0.5"]  # 57 steps at 256
TWO = ["--batch", 256, "--nproc", 2, *SHORT, "--set", "train.checkpoint_every=4"]
IDLE_S = 30.0
"""The idle duration of a process a test starts here without naming its own (``idle_s``): every
such process took at most 30 s on the idle development VM under `-n 2` (DATE_TEST_TIMES,
tests/bounds.py), so each is killed as hung after hang_limit(30) = 10 minutes."""


def run_group(cmd, env=None, idle_s=IDLE_S, cwd=ROOT):
    """Run a command in its own process group; once it has run hang_limit(``idle_s``) seconds
    kill the whole group (torchrun's workers included), so that a hang fails the test without
    leaving processes behind. ``idle_s``: how long the command takes on an idle machine."""
    timeout = hang_limit(idle_s)
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", **(env or {})}
    proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"timed out after {timeout} s: {' '.join(map(str, cmd))}\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def in_one_job(out: Path, runs: dict[str, list], nproc: int = 1,
               idle_s: float = IDLE_S) -> dict[str, dict]:
    """`date scale` runs (name -> its arguments, spec first) one after the other in one job
    (tests/one_job.py): one interpreter for one process, one torchrun job for more, each run
    joining it as `date scale` does inside a job torchrun started. Name -> rank 0's record (exit
    code, stdout, stderr), after checking every other process's runs ended as rank 0's did."""
    out.mkdir(parents=True, exist_ok=True)
    listed = out / "runs.json"
    listed.write_text(json.dumps({name: [str(a) for a in args] for name, args in runs.items()}))
    module = ["-m", "tests.one_job", out, listed]
    job = [sys.executable, *module] if nproc == 1 else \
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", nproc, "--standalone",
         *module]
    result = run_group(job, idle_s=idle_s)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [[json.loads(line) for line in (out / f"records-{rank}.jsonl").read_text().splitlines()]
             for rank in range(nproc)]
    for others in ranks[1:]:
        assert [(r["run"], r["exit_code"]) for r in others] == \
            [(r["run"], r["exit_code"]) for r in ranks[0]], others
    return {r["run"]: r for r in ranks[0]}


def finish(proc, idle_s=IDLE_S):
    """communicate() with a process started in its own session; kill its group as hung after
    hang_limit(``idle_s``) seconds."""
    timeout = hang_limit(idle_s)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"timed out after {timeout} s: {proc.args}")


def date(*args, env=None, idle_s=IDLE_S):
    """Run `python -m date_engine ...` as a user would; returns the CompletedProcess."""
    return run_group([sys.executable, "-m", "date_engine", *args], env=env, idle_s=idle_s)


def final_model(run_dir: Path) -> dict[str, torch.Tensor]:
    """The model of the run's newest checkpoint: a file, or (fsdp) a folder of shards read whole
    with torch's own converter."""
    newest = sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    if newest.is_dir():
        import tempfile
        import warnings

        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "no process group": reading alone is the point
            dcp_to_torch_save(newest, Path(tmp) / "whole.pt")
            whole = torch.load(Path(tmp) / "whole.pt", weights_only=True)
        return {k.removeprefix("model/"): v for k, v in whole.items() if k.startswith("model/")}
    return torch.load(newest, weights_only=True)["model"]


def metrics(run_dir: Path, drop=("samples_per_s", "time_s")) -> list[dict]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if k not in drop} for line in lines]


def max_relative_difference(a: dict, b: dict) -> float:
    return max(((a[k] - b[k]).abs().max() / a[k].abs().max().clamp_min(1e-12)).item() for k in a)




def start(*args, env=None) -> subprocess.Popen:
    """Start `python -m date_engine ...` in a session of its own (finish() it)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "date_engine", *map(str, args)], cwd=ROOT,
                            env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
