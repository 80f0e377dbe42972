"""The emitted Slurm job script on a real Slurm (tests/slurm.py: Debian's daemons on localhost),
2 processes of lenet-digits: a job stopped part way and requeued ends where `date scale --nproc 2`
does, bit for bit."""

from __future__ import annotations

import subprocess

import pytest
import torch

from tests.runs import SPEC, final_model, metrics
from tests.slurm import local_slurm, stop_slurm, wait_for

pytestmark = pytest.mark.slow

RUN = ["--batch", 256, "--set", "baseline.epochs=24", "--set", "baseline.warmup_epochs=0.5",
       "--set", "train.checkpoint_every=4"]
"""lenet-digits at batch 256 for 135 steps (long enough to be stopped part way), checkpointing
every 4."""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slurm")
    env = local_slurm(folder)
    if isinstance(env, str):
        pytest.skip(env)
    yield env
    stop_slurm(folder)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """`date scale --nproc 2` at one thread a process, as the script's tasks train (threads
    change the order of a convolution's sums)."""
    import os

    from tests.runs import date

    out = tmp_path_factory.mktemp("reference") / "run"
    done = date("scale", SPEC, *RUN, "--nproc", 2, "-o", out,
                env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    return out


def _script(tmp_path, env, *extra) -> str:
    from tests.runs import date

    emitted = date("plan", SPEC, *RUN, "--devices", 2, *extra, "--emit", "slurm-cpu")
    assert emitted.returncode == 0, emitted.stderr
    (tmp_path / "job.sh").write_text(emitted.stdout)
    return emitted.stdout


def _submit(tmp_path, env, *options) -> str:
    done = subprocess.run(["sbatch", "--parsable", "--chdir", str(tmp_path), *options,
                           str(tmp_path / "job.sh")], env={**env, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


@pytest.mark.parametrize("sig, whom", [("USR1", "--batch"), ("TERM", "--full")])
def test_a_signalled_job_requeued_ends_where_the_uninterrupted_run_does(
        slurm, reference, tmp_path, sig, whom):
    """SIGUSR1 to the batch shell alone (what --signal=B:USR1@... sends before the time limit:
    date scale's launcher passes it on) and SIGTERM to every process of the job (`scancel
    --signal=TERM --full`, an operator's or a preemption's): every process stops after its step
    with a checkpoint of that step; `scontrol requeue` runs the same script, whose
    --auto-resume continues the run to the reference's weights."""
    import json
    import time

    from tests.bounds import hang_limit

    script = _script(tmp_path, slurm)
    assert "--auto-resume" in script and "#SBATCH --cpus-per-task=2" in script
    job = _submit(tmp_path, slurm)
    out = tmp_path / "runs" / "lenet-digits-B256"
    deadline = time.monotonic() + hang_limit(30)
    while not list((out / "checkpoints").glob("step-*.pt")):
        assert time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.2)
    subprocess.run(["scancel", f"--signal={sig}", whom, job], env=slurm, check=True)
    log = tmp_path / "date-lenet-digits-B256.out"
    assert wait_for(job, slurm, idle_s=60) != "COMPLETED", log.read_text()[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    stopped = max(int(p.name[5:13]) for p in (out / "checkpoints").glob("step-*.pt"))
    assert summary["stopped_by"] == f"SIG{sig}" and summary["steps"] == stopped < 135
    subprocess.run(["scontrol", "requeue", job], env=slurm, check=True)
    # Slurm holds a requeued job back two minutes; the test waits 3 s (a start within the second
    # its credential was revoked in is refused)
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now+3"], env=slurm,
                   check=True)
    assert wait_for(job, slurm, idle_s=60) == "COMPLETED", log.read_text()[-3000:]
    assert f"(step {stopped})" in log.read_text()  # resumed from the step it stopped at
    a, b = final_model(reference), final_model(out)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert metrics(out) == metrics(reference)
