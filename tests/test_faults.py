"""What a cluster does to a job, and what survives it: two writers, a NaN, a kill mid-write, a
flipped bit, a killed launcher, a replan, a cut-off log, data that lies. Each test reproduces one
failure an outside check found (issue "Nothing lost, nothing poisoned") through the real command
line; the table in docs/training.md ("What survives what") names them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from date_engine.data.prepare import write_idx
from date_engine.runfolder import RunFolder
from date_engine.train import checkpoint as ckpt
from date_engine.train.launch import job_exit_code
from tests.bounds import hang_limit
from tests.conftest import RECIPES
from tests.runs import ROOT, SHORT, SPEC, TWO, date, final_model, finish, metrics, start

# Every test here starts `date` processes that train: the slow tier (pyproject.toml).
pytestmark = pytest.mark.slow


CKPT2 = ["--set", "train.checkpoint_every=2"]


def wait_for(condition, idle_s=15, what="the condition"):
    """Poll ``condition`` (no sleeping for a guessed time); fail as hung after
    hang_limit(``idle_s``) seconds (the runs waited for here took at most 15 s idle)."""
    deadline = time.monotonic() + hang_limit(idle_s)
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def logged_steps(out: Path) -> int:
    return sum('"loss"' in line for line in (out / "metrics.jsonl").read_text().splitlines()) \
        if (out / "metrics.jsonl").exists() else 0


def records(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in ("spec.yaml", "config.json", "plan.json")}


# ------------------------------------------------------------------ 1. two writers, one folder


def test_a_second_writer_is_refused_and_names_the_first(uninterrupted, tmp_path):
    out = tmp_path / "twin"
    first = start("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--set", "train.log_every=1")
    wait_for(lambda: RunFolder(out).lock_holder() is not None, what="the first run's lock")
    second = date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--set", "train.seed=1")
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"is being written by process {first.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    finish(first)
    assert first.returncode == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 57
    assert len([r for r in metrics(out) if "loss" in r]) == 57  # one run's lines, not two
    assert RunFolder(out).lock_holder() is None  # released when the run ended


# ------------------------------------------------------------------ 2. a NaN is never saved


def test_weights_that_turned_nan_are_never_saved(tmp_path):
    out = tmp_path / "run"
    result = date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--set", "baseline.lr=1e6",
                  "--set", "train.checkpoint_every=1")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "non-finite" in result.stderr and "Traceback" not in result.stderr
    for path in sorted((out / "checkpoints").glob("step-*.pt")):
        payload = torch.load(path, weights_only=True)
        assert ckpt.finite(payload["model"], payload["optimizer"]), path.name
    newest = ckpt.newest_valid(RunFolder(out))
    if newest is not None:  # the message names a checkpoint training can go on from
        assert f"last good checkpoint is {newest.path}" in result.stderr
    else:
        assert "no finite state was left" in result.stderr


def test_a_state_that_turned_nan_under_a_finite_loss_stops_the_run_at_once(tmp_path):
    """A NaN in the state that the loss does not see (a parameter the forward never reads) was
    found only when a checkpoint was next due — at the end here, 55 steps late. The state is
    now checked every step in the step's one synchronisation."""
    import json

    out = tmp_path / "run"
    result = date("scale", SPEC, "--batch", 256, *SHORT, "-o", out,
                  "--recipe", "tests.fault_recipes:lenet_digits_state_nan",
                  env={"DATE_TEST_NAN_AT": "2"})
    assert result.returncode == 3, result.stdout + result.stderr
    assert "became non-finite by step 1 (the loss stayed finite)" in result.stderr
    assert json.loads((out / "FAILED.json").read_text())["step"] == 1
    assert not list((out / "checkpoints").glob("step-*.pt")) if (out / "checkpoints").exists() \
        else True


# ------------------------------------------------------------------ 3. rotation after a replan


def test_a_replanned_runs_checkpoints_are_kept_and_resumed(tmp_path):
    out = tmp_path / "run"
    old = date("scale", SPEC, "--batch", 64, *SHORT, "-o", out, "--max-steps", 30,
               "--set", "train.checkpoint_every=10")
    assert old.returncode == 0, old.stderr
    new = date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--resume", "--force-replan",
               "--max-steps", 12, "--set", "train.checkpoint_every=3")
    assert new.returncode == 0, new.stderr
    names = sorted(p.name for p in (out / "checkpoints").glob("step-*.pt"))
    assert "step-00000009.pt" in names and "step-00000012.pt" in names  # the new plan's, kept
    resumed = date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--resume",
                   "--set", "train.checkpoint_every=3")
    assert resumed.returncode == 0, resumed.stderr
    assert "step-00000012.pt (step 12)" in resumed.stdout  # not the old plan's step 30


# ------------------------------------------------------------------ 4. a refusal writes nothing


def test_a_refused_command_leaves_the_record_as_it_was(tmp_path):
    out = tmp_path / "run"
    assert date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--max-steps", 5).returncode == 0
    before = records(out)
    changed = date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--resume",
                   "--set", "baseline.lr=0.5")
    assert changed.returncode == 2 and "another spec" in changed.stderr
    other = date("scale", SPEC, "--batch", 64, *SHORT, "-o", out)
    assert other.returncode == 2 and "already holds checkpoints" in other.stderr
    assert records(out) == before
    assert "DATE" not in changed.stdout + other.stdout  # refused before the plan was printed


# ------------------------------------------------------------------ 5. a killed first write


def test_the_leftover_of_a_killed_write_neither_blocks_nor_stays(tmp_path):
    out = tmp_path / "cell"
    (out / "checkpoints").mkdir(parents=True)
    leftover = out / "checkpoints" / ".step-00000002.pt.tmp-999999"
    leftover.write_bytes(b"half a checkpoint")
    from date_engine.sweep.grid import Cell
    from date_engine.sweep.results import read_cell

    assert read_cell(Cell("date", 256, 0), out, "accuracy").status == "pending"  # not resumed
    result = date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--max-steps", 3)
    assert result.returncode == 0, result.stderr
    assert not leftover.exists()


# ------------------------------------------------------------------ 6. a flipped bit


def test_a_corrupted_checkpoint_is_detected_and_the_one_before_it_used(uninterrupted, tmp_path):
    out = tmp_path / "run"
    first = date("scale", SPEC, "--batch", 256, *SHORT, *CKPT2, "-o", out, "--max-steps", 23)
    assert first.returncode == 0, first.stderr
    newest = out / "checkpoints" / "step-00000023.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit, in the middle of the tensors
    newest.write_bytes(bytes(data))
    resumed = date("scale", SPEC, "--batch", 256, *SHORT, *CKPT2, "-o", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "skipped step-00000023.pt: its bytes do not match the checksum" in resumed.stdout
    assert "resuming from" in resumed.stdout and "step-00000022.pt" in resumed.stdout
    a, b = final_model(uninterrupted), final_model(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------ 7. a killed launcher


def test_workers_stop_with_their_launcher_and_the_run_resumes(two_processes, tmp_path):
    out = tmp_path / "run"
    launcher = start("scale", SPEC, *TWO, "-o", out)
    wait_for(lambda: (out / "checkpoints" / "step-00000008.pt").exists(), what="step 8 saved")
    os.kill(launcher.pid, signal.SIGKILL)  # the launcher only: its workers are left alone by it
    finish(launcher)
    wait_for(lambda: RunFolder(out).lock_holder() is None, what="the workers to exit")
    resumed = date("scale", SPEC, *TWO, "-o", out, "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    a, b = final_model(two_processes), final_model(out)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert metrics(out) == metrics(two_processes)  # no lines from orphans beside the resumed run


# ------------------------------------------------------------------ 8. the metrics log


def test_a_cut_off_log_line_and_a_finished_run(uninterrupted, tmp_path):
    out = tmp_path / "run"
    assert date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--max-steps", 20).returncode == 0
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 21, "epoch": 3.7, "lo')  # the writer was killed mid-line
    resumed = date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert metrics(out) == metrics(uninterrupted)
    log = (out / "metrics.jsonl").read_bytes()
    again = date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--resume")
    assert again.returncode == 0 and "already finished" in again.stdout
    assert (out / "metrics.jsonl").read_bytes() == log  # no second final evaluation


# ------------------------------------------------------------------ 9. signals under torchrun


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_a_two_process_run_exits_with_its_code(sig, two_processes, tmp_path):
    out = tmp_path / "run"
    launcher = start("scale", SPEC, *TWO, "-o", out)
    wait_for(lambda: (out / "checkpoints" / "step-00000004.pt").exists(), what="a checkpoint")
    if sig == signal.SIGINT:
        os.killpg(launcher.pid, sig)  # Ctrl-C: the terminal signals the whole group
    else:
        launcher.send_signal(sig)  # a scheduler's SIGTERM to the job's process
    stdout, stderr = finish(launcher)
    assert launcher.returncode == 128 + sig, stdout + stderr
    # the whole stderr on failure (the assertion's own diff is truncated): where it was raised
    assert "Traceback" not in stderr, stderr[stderr.index("Traceback") - 200:][:6000]
    assert list((out / "checkpoints").glob("step-*.pt")), "a checkpoint on the way out"
    if sig == signal.SIGINT:  # resuming from it is the SIGTERM case's check, the same path
        return
    resumed = date("scale", SPEC, *TWO, "-o", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a, b = final_model(two_processes), final_model(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


LATE_SIGNAL = """
import os, signal, sys
from date_engine.spec import load_spec
from date_engine.train import trainer
from date_engine.train.config import RunConfig

finish = trainer.Trainer._finish
def signalled_finish(self, summary):  # as a worker whose peer got the launcher's signal first
    for name in sys.argv[2].split(","):
        os.kill(os.getpid(), signal.Signals[name])
    finish(self, summary)
trainer.Trainer._finish = signalled_finish
spec = load_spec(sys.argv[3], ["baseline.epochs=1", "baseline.warmup_epochs=0.1"])
sys.exit(trainer.run(RunConfig(spec=spec.model_dump(mode="json", exclude_none=True),
                               spec_path=sys.argv[3], recipe="lenet-digits", batch=16,
                               world_size=1, micro_batch=16, output_dir=sys.argv[1])))
"""


@pytest.mark.parametrize("signals, code", [("SIGTERM", 143), ("SIGINT,SIGINT", 130)])
def test_a_signal_after_the_loop_ends_is_noted_not_obeyed(tmp_path, signals, code):
    """The launcher signals its workers one after another: one may get its signal after the job
    agreed to stop on its peer's, in the final checkpoint or the job's last barrier. Killed
    there, it would take its peers down in that collective (a traceback on rank 0 in CI)."""
    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-c", LATE_SIGNAL, str(out), signals, SPEC],
                            cwd=ROOT, capture_output=True, text=True, timeout=hang_limit(12),
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    summary = RunFolder(out).read_summary()
    assert summary.steps == summary.total_steps and summary.stopped_by is None
    assert (out / "checkpoints" / f"step-{summary.steps:08d}.pt").exists()


def test_the_jobs_exit_code_is_the_most_telling_workers():
    assert job_exit_code([143, 3]) == 3  # a NaN under --max-restarts: not the SIGTERM after it
    assert job_exit_code([-15, 2]) == 2
    assert job_exit_code([-15, -9]) == 143
    assert job_exit_code([1, -9]) == 137


def test_a_nan_under_max_restarts_exits_3(tmp_path):
    result = date("scale", SPEC, *TWO, "-o", tmp_path / "run", "--max-restarts", 1,
                  "--recipe", "tests.fault_recipes:lenet_digits_nan", env={"DATE_TEST_NAN_AT": "8"})
    assert result.returncode == 3, result.stdout + result.stderr
    assert "not retried on restart" in result.stderr


# ------------------------------------------------------------------ 10. data that lies


def mnist_files(root: Path, n: int, labels=None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, count in (("train", n), ("t10k", 32)):
        write_idx(root / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 255, (count, 28, 28)))
        y = rng.integers(0, 10, count) if labels is None else np.full(count, labels)
        write_idx(root / f"{split}-labels-idx1-ubyte.gz", y)
    return root


LENET_SMALL = ["--set", "baseline.dataset_size=null", "--set", "baseline.batch_size=64",
               "--set", "baseline.iterations=null", "--set", "baseline.epochs=2",
               "--set", "baseline.warmup_epochs=0.1"]


@pytest.mark.parametrize("batch, words", [
    (1024, "batch 1024 is larger than the training data (512 samples"),
    (128, "the training data holds 512 samples, not the 60000 recipe lenet-mnist assumes"),
])
def test_a_data_set_smaller_than_the_recipe_says(tmp_path, batch, words):
    data = mnist_files(tmp_path / "mnist", 512)
    result = date("scale", RECIPES / "lenet-mnist.yaml", "--batch", batch, *LENET_SMALL,
                  "--set", f"train.data_dir={data}", "-o", tmp_path / "run")
    assert result.returncode == 2, result.stdout + result.stderr
    assert words in result.stderr and "Traceback" not in result.stderr


def test_labels_out_of_range(tmp_path):
    data = mnist_files(tmp_path / "mnist", 512, labels=255)
    result = date("scale", RECIPES / "lenet-mnist.yaml", "--batch", 128, *LENET_SMALL,
                  "--set", "baseline.dataset_size=512", "--set", f"train.data_dir={data}",
                  "-o", tmp_path / "run")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "labels must lie in 0..9, found 255..255" in result.stderr


# ------------------------------------------------------------------ a full disk


def test_a_full_disk_is_one_sentence(tmp_path, monkeypatch):
    """A checkpoint write that fails with ENOSPC (the trainer in this process, writes patched)."""
    import errno

    from typer.testing import CliRunner

    from date_engine.cli import app

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x.tmp"))

    monkeypatch.setattr(ckpt, "save_atomic", full)
    result = CliRunner().invoke(app, ["scale", SPEC, "--batch", 256, *SHORT, "-o",
                                      str(tmp_path / "run"), "--set", "train.checkpoint_every=2"])
    assert result.exit_code == 1, result.output
    assert "No space left on device; make room" in result.output
    assert "Traceback" not in result.output
