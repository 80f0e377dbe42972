"""The emitted jobs, run: the Slurm script on a real Slurm (tests/slurm.py: Debian's daemons on
localhost) and the Kubeflow TrainJob's command in the environment its runtime gives torchrun, 2
processes of lenet-digits each. A job stopped part way (by any signal, SIGKILL included) and
started again ends where `date scale --nproc 2` does, bit for bit."""

from __future__ import annotations

import subprocess

import pytest
import torch

from tests.runs import SPEC, final_model, metrics
from tests.slurm import local_slurm, stop_slurm, wait_for

pytestmark = pytest.mark.slow

RUN = ["--batch", 256, "--set", "baseline.epochs=24", "--set", "baseline.warmup_epochs=0.5",
       "--set", "train.checkpoint_every=4", "--set", "train.log_every=1"]
"""lenet-digits at batch 256 for 135 steps (long enough to be stopped part way), checkpointing
every 4, a line of metrics.jsonl every step."""
EVERY = 4


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slurm")
    env = local_slurm(folder)
    if isinstance(env, str):
        pytest.skip(env)
    # sbatch passes this environment on: this Python's own bin first (python, torchrun)
    import os
    import sys

    yield {**env, "PATH": f"{os.path.dirname(sys.executable)}:{env['PATH']}"}
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


def _checkpoint_after(out, step: int, running=lambda: True, limit_s: float = 30) -> None:
    """Wait for a checkpoint of a step after ``step`` while ``running()`` is True (else it
    says why not)."""
    import time

    from tests.bounds import hang_limit

    deadline = time.monotonic() + hang_limit(limit_s)
    while not [p for p in (out / "checkpoints").glob("step-*.pt") if int(p.name[5:13]) > step]:
        assert time.monotonic() < deadline, f"no checkpoint after step {step}"
        state = running()
        assert state is True, f"the run ended with no checkpoint after step {step}: {state}"
        time.sleep(0.2)


def _queued(job: str, env) -> bool:
    """Whether ``job`` is still waiting or running."""
    return bool(subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True,
                               text=True).stdout.strip())


def _requeue(job: str, env) -> None:
    subprocess.run(["scontrol", "requeue", job], env=env, check=True)
    # Slurm holds a requeued job back two minutes; the test waits 3 s (a start within the second
    # its credential was revoked in is refused)
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now+3"], env=env,
                   check=True)


def _stopped_where_it_says(out, sig: str, before: int = 0) -> int:
    """The step the run stopped by ``sig`` continues from (after ``before``, where the last
    stop left it): its newest checkpoint, every one of which reads back whole. SIGUSR1 and
    SIGTERM: the step each process reached (summary.json); SIGKILL: within EVERY steps of the
    last one trained (its line in metrics.jsonl; no new summary.json)."""
    import json

    from date_engine.train import checkpoint

    saved = sorted((out / "checkpoints").glob("step-*.pt"))
    assert saved and all(checkpoint._read(p)[0] is None for p in saved), sig
    stopped = int(saved[-1].name[5:13])
    summary = out / "summary.json"
    if sig == "KILL":
        trained = max(line["step"] for line in metrics(out))
        assert 0 <= trained - stopped <= EVERY, (trained, stopped)
        assert not summary.exists() or json.loads(summary.read_text())["steps"] == before
    else:
        summary = json.loads(summary.read_text())
        assert (summary["stopped_by"], summary["steps"]) == (f"SIG{sig}", stopped)
    assert before < stopped < 135, (sig, before, stopped)
    return stopped


STOPS = [("USR1", "--batch"), ("TERM", "--full"), ("KILL", "every process")]
"""How the test stops the job, one after another: SIGUSR1 to the batch shell alone (what
--signal=B:USR1@... sends before the time limit; date scale's launcher passes it on), SIGTERM to
every process of the job (`scancel --signal=TERM --full`: an operator's or a preemption's) and
SIGKILL to every process at once (what slurmstepd sends when a cancelled job's grace time,
KillWait, runs out; `scancel --signal=KILL --full` reaches the batch shell alone, whose workers
then stop as from SIGTERM)."""


def _stop(job: str, sig: str, whom: str, env) -> None:
    import os
    import signal

    if sig != "KILL":
        subprocess.run(["scancel", f"--signal={sig}", whom, job], env=env, check=True)
        return
    listed = subprocess.run(["scontrol", "listpids", job], env=env, capture_output=True,
                            text=True, check=True).stdout.split("\n")[1:]
    pids = [int(line.split()[0]) for line in listed if line.strip()]
    assert len(pids) >= 3, listed  # the launcher and its 2 workers
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_job_stopped_and_requeued_each_way_ends_where_the_uninterrupted_run_does(
        slurm, reference, tmp_path):
    """The emitted script, stopped each way of STOPS in turn, after a checkpoint newer than the
    last stop's: by SIGUSR1 and SIGTERM every process stops after its step with a checkpoint of
    that step; by SIGKILL the steps since the last periodic checkpoint are lost and no
    checkpoint is damaged. Each `scontrol requeue` runs the same script, whose --auto-resume
    continues from where the run stopped, to the reference's weights and metrics.jsonl; requeued
    once more, the finished run says so and does nothing."""
    script = _script(tmp_path, slurm)
    assert "--auto-resume" in script and "#SBATCH --cpus-per-task=2" in script
    job = _submit(tmp_path, slurm)
    out, log = tmp_path / "runs" / "lenet-digits-B256", tmp_path / "date-lenet-digits-B256.out"
    stopped = 0
    for sig, whom in STOPS:
        _checkpoint_after(out, stopped, lambda: _queued(job, slurm) or log.read_text()[-3000:])
        _stop(job, sig, whom, slurm)
        assert wait_for(job, slurm, idle_s=60) != "COMPLETED", (sig, log.read_text()[-3000:])
        stopped = _stopped_where_it_says(out, sig, stopped)
        _requeue(job, slurm)
    assert wait_for(job, slurm, idle_s=60) == "COMPLETED", log.read_text()[-3000:]
    a, b = final_model(reference), final_model(out)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert metrics(out) == metrics(reference)
    _requeue(job, slurm)
    assert wait_for(job, slurm, idle_s=30) == "COMPLETED", log.read_text()[-3000:]
    assert log.read_text().rstrip().endswith("of 135; nothing to do.")


LONG = ["--batch", 256, "--set", "baseline.epochs=1800", "--set", "baseline.warmup_epochs=0.5",
        "--set", "train.checkpoint_every=500", "--set", "train.log_every=500"]
"""lenet-digits at batch 256 for 10,104 steps: about 75 s on one process on the development VM,
longer than the 30 to 60 s after its start at which Slurm sends the signal of a 2-minute job's
--signal=B:USR1@60 (slurmctld checks time limits every 30 s). The margin is this machine's speed: a
CPU over 1.2× faster finishes before the signal, and the test says so."""


def _job_field(job: str, env, field: str) -> str:
    shown = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True,
                           text=True).stdout
    return next((w.split("=", 1)[1] for w in shown.split() if w.startswith(f"{field}=")), "")


def test_a_job_at_its_time_limit_requeues_itself_and_completes(slurm, tmp_path):
    """The emitted script (one process) with a 2-minute time limit and the stop signal 60 s
    before it: Slurm's SIGUSR1 stops the run after its step with a checkpoint, date scale requeues
    the job itself (scontrol requeue), and the job started again continues; it ends COMPLETED by
    itself, with the weights of the uninterrupted run, trained meanwhile on the other core. The
    test only brings each requeued job's start forward (Slurm holds it back 2 minutes)."""
    import os
    import threading
    import time

    from tests.bounds import hang_limit
    from tests.runs import date

    reference, finished = tmp_path / "reference", []  # the run never stopped, on the other core
    never_stopped = threading.Thread(target=lambda: finished.append(date(
        "scale", SPEC, *LONG, "-o", reference, env={**os.environ, "OMP_NUM_THREADS": "1"})))
    never_stopped.start()
    emitted = date("plan", SPEC, *LONG, "--emit", "slurm-cpu")
    assert emitted.returncode == 0, emitted.stderr
    (tmp_path / "job.sh").write_text(emitted.stdout)
    job = _submit(tmp_path, slurm, "--time=2", "--signal=B:USR1@60")
    log = tmp_path / "date-lenet-digits-B256.out"
    deadline, nudged = time.monotonic() + hang_limit(300), "0"
    while _queued(job, slurm):
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        restarts = _job_field(job, slurm, "Restarts")
        if restarts != nudged and _job_field(job, slurm, "Reason") == "BeginTime":
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now+3"],
                           env=slurm)  # once a requeue
            nudged = restarts
        time.sleep(1)
    assert wait_for(job, slurm, idle_s=30) == "COMPLETED", log.read_text()[-3000:]
    assert int(_job_field(job, slurm, "Restarts")) >= 1, (
        "the run ended before Slurm's signal (30 to 60 s after its start): on a machine this "
        "much faster, lengthen LONG")
    never_stopped.join(timeout=hang_limit(120))
    assert finished and finished[0].returncode == 0, finished and finished[0].stderr
    text = log.read_text()
    assert "checkpointed: requeueing it" in text and "Traceback" not in text, text[-3000:]
    out = tmp_path / "runs" / "lenet-digits-B256"
    a, b = final_model(reference), final_model(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_hf_example_as_the_jobs_command_trains_the_plan_on_two_processes(slurm, tmp_path):
    """--emit slurm-cpu --command: HF's Trainer example under torchrun on 2 processes, the plan
    split over them, its checkpoints in its folder (tests/test_integrations.py resumes them)."""
    pytest.importorskip("transformers")
    from tests.conftest import ROOT
    from tests.runs import date

    folder = tmp_path / "hf"
    emitted = date("plan", SPEC, "--batch", 256, "--devices", 2, "--emit", "slurm-cpu",
                   "--command", f"python {ROOT / 'examples' / 'hf_trainer.py'} {folder}")
    assert emitted.returncode == 0, emitted.stderr
    (tmp_path / "job.sh").write_text(emitted.stdout)
    job = _submit(tmp_path, slurm)
    log = tmp_path / "date-lenet-digits-B256.out"
    assert wait_for(job, slurm, idle_s=60) == "COMPLETED", log.read_text()[-3000:]
    assert log.read_text().count("32 steps at batch 128") == 1  # rank 0 of the 2
    assert (folder / "checkpoint-32").is_dir() and (folder / "final.pt").exists()


def test_the_trainjobs_command_stopped_and_restarted_ends_where_the_uninterrupted_run_does(
        reference, tmp_path):
    """The TrainJob's command as its runtime runs it on each node: torchrun reading PET_NNODES,
    PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT (here 1 node, 2
    processes, the volume a local folder). SIGTERM to torchrun (what the kubelet sends a deleted
    or preempted pod's first process) stops both processes after their step with a checkpoint;
    the same command, started again as the restarted pod runs it, continues to the reference's
    weights."""
    import os
    import signal
    import socket
    import sys

    import yaml

    from tests.bounds import hang_limit
    from tests.runs import date

    emitted = date("plan", SPEC, *RUN, "--devices", 2, "--emit", "k8s-cpu")
    assert emitted.returncode == 0, emitted.stderr
    command = yaml.safe_load(emitted.stdout)["spec"]["trainer"]["command"]
    out = tmp_path / "runs"
    command = [str(out) + word[len("/runs"):] if word.startswith("/runs/") else word
               for word in command]
    assert command[0] == "torchrun"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PET_NNODES": "1", "PET_NPROC_PER_NODE": "2",
           "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port)}
    argv = [sys.executable, "-m", "torch.distributed.run", *command[1:]]
    pod = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    run = out / "lenet-digits-B256"
    _checkpoint_after(run, 0, lambda: pod.poll() is None or "torchrun exited")
    pod.send_signal(signal.SIGTERM)
    log = pod.communicate(timeout=hang_limit(30))[0]
    assert pod.returncode != 0, log[-3000:]
    stopped = _stopped_where_it_says(run, "TERM")
    again = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=hang_limit(60))
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"(step {stopped})" in again.stdout
    a, b = final_model(reference), final_model(run)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert metrics(run) == metrics(reference)
