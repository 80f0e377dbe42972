"""`date scale` end to end, through the real command line, torchrun and gloo, on lenet-digits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.bounds import float64_formula, hang_limit, runs_bound
from tests.conftest import RECIPES, ROOT
from tests.runs import (
    SHORT,
    SPEC,
    TWO,
    date,
    final_model,
    finish,
    max_relative_difference,
    metrics,
    run_group,
)

# ------------------------------------------------------------------ the exact global batch


# Every test here starts `date` processes that train: the slow tier (pyproject.toml).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def batch64_runs(tmp_path_factory):
    """Batch 64 split three ways, 8 optimizer steps each: 64 × 1 × 1, 16 × 1 × 4, 16 × 2 × 2."""
    root = tmp_path_factory.mktemp("split")
    runs = {}
    for name, nproc, micro in [("whole", 1, 64), ("accumulate4", 1, 16), ("gloo2x2", 2, 16)]:
        out = root / name
        result = date("scale", SPEC, "--batch", 64, "--nproc", nproc, "--micro-batch", micro,
                      "--max-steps", 8, "-o", out)
        assert result.returncode == 0, result.stdout + result.stderr
        runs[name] = out
    return runs


def test_accumulation_and_processes_reach_the_whole_batch_parameters(batch64_runs):
    """Same 64 samples per step, however split, so the same parameters up to float32 summation
    order: the micro-batch means are added in another order (~1e-7 relative per step), and RMSprop's
    division by sqrt(v), with v still one or two squared gradients at these first steps, magnifies
    that about tenfold; after 8 steps 1e-5 bounds it. A different data order is 1000× further."""
    whole = final_model(batch64_runs["whole"])
    for name in ("accumulate4", "gloo2x2"):
        # lenet-digits ships RMSprop: its first steps are lr/√(1 − α) = 10·lr an entry
        assert max_relative_difference(whole, final_model(batch64_runs[name])) <= \
            runs_bound(8, amplification=10), name
    plan = json.loads((batch64_runs["gloo2x2"] / "plan.json").read_text())
    assert (plan["micro_batch"], plan["world_size"], plan["accumulation_steps"]) == (16, 2, 2)


def test_another_data_order_is_far_away(batch64_runs, tmp_path):
    out = tmp_path / "seed1"
    assert date("scale", SPEC, "--batch", 64, "--max-steps", 8, "--set", "train.seed=1",
                "-o", out).returncode == 0
    assert max_relative_difference(final_model(batch64_runs["whole"]), final_model(out)) > 1e-2


# ------------------------------------------------------------------ stop, kill, resume


def test_full_run_writes_its_records(uninterrupted):
    for name in ("spec.yaml", "config.json", "plan.json", "metrics.jsonl", "summary.json"):
        assert (uninterrupted / name).is_file(), name
    summary = json.loads((uninterrupted / "summary.json").read_text())
    assert summary["steps"] == summary["total_steps"] == 57 and summary["metric"] > 50
    lines = metrics(uninterrupted)
    logged = [x for x in lines if "loss" in x]
    assert [x["step"] for x in logged] == [20, 40, 57]
    for key in ("epoch", "lr", "loss", "grad_norm", "ratio_min", "ratio_median", "ratio_max"):
        assert key in logged[0], key
    assert lines[-1] == {"step": 57, "eval": {"accuracy": summary["metric"]}}


def test_stopped_and_resumed_run_equals_the_uninterrupted_one(uninterrupted, tmp_path):
    """Stopped at --max-steps, then continued: by --auto-resume (what a requeued job script runs
    every time: it starts the run where the folder holds no checkpoint, continues it where it
    does, and exits 0 saying the run is finished once it is), ending as the uninterrupted run.
    (--resume continues the signalled runs below.)"""
    out = tmp_path / "run"
    command = ("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--auto-resume")
    first = date(*command, "--max-steps", 23)
    assert first.returncode == 0, first.stderr
    assert f"--auto-resume: no checkpoint in {out} yet; starting the run." in first.stderr
    continue_line = next(x for x in first.stdout.splitlines() if x.startswith("continue with:"))
    assert continue_line.endswith("--resume") and "--max-steps" not in continue_line
    assert "--auto-resume" not in continue_line
    second = date(*command)
    assert second.returncode == 0, second.stderr
    assert "resuming from" in second.stdout and "--auto-resume" not in second.stderr
    a, b = final_model(uninterrupted), final_model(out)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert metrics(out) == metrics(uninterrupted)
    again = date(*command)
    assert again.returncode == 0 and "already finished" in again.stdout
    assert metrics(out) == metrics(uninterrupted)


def test_sigkilled_worker_is_restarted_by_torchrun_and_resumes(two_processes, tmp_path):
    common = TWO
    killed = date("scale", SPEC, *common, "-o", tmp_path / "killed", "--max-restarts", 1,
                  "--recipe", "tests.fault_recipes:lenet_digits_killed",
                  env={"DATE_TEST_KILL_AT": "11"})  # rank 0 dies in step 11; step 8 was saved
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert "resuming from" in killed.stdout and "step-00000008.pt" in killed.stdout
    a, b = final_model(two_processes), final_model(tmp_path / "killed")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert metrics(tmp_path / "killed") == metrics(two_processes)


def test_joins_a_job_started_by_torchrun(two_processes, tmp_path):
    out = tmp_path / "run"
    result = run_group(  # the job says how many processes: no --nproc
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "date_engine", "scale", SPEC, *TWO[:2], *TWO[4:], "-o", out])
    assert result.returncode == 0, result.stdout + result.stderr
    a, b = final_model(two_processes), final_model(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_joins_a_job_started_by_srun(two_processes, tmp_path):
    """Two processes with the variables srun sets, meeting at the first node of the job."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    procs = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": "2",
            "SLURM_LOCALID": str(rank),
            "SLURM_JOB_NODELIST": "localhost",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }  # as torchrun sets it: the same kernels, the same sums
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "date_engine",
                    "scale",
                    SPEC,
                    *map(str, TWO),
                    "-o",
                    str(out),
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        )
    outputs = [finish(p) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    a, b = final_model(two_processes), final_model(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_sigterm_finishes_the_step_checkpoints_and_resumes(uninterrupted, tmp_path, sig):
    """SIGTERM, and SIGUSR1: what srun forwards to its tasks (a SIGTERM to srun kills them with
    SIGKILL), sent before a Slurm job's time limit by --signal=B:USR1@seconds."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "date_engine",
            "scale",
            SPEC,
            "--batch",
            "256",
            *SHORT,
            "-o",
            str(out),
            "--set",
            "train.log_every=1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + hang_limit(5)  # three steps logged 5 s after the start, idle
    while time.monotonic() < deadline and not (
        (out / "metrics.jsonl").exists() and (out / "metrics.jsonl").read_text().count("\n") >= 3
    ):
        time.sleep(0.05)
    proc.send_signal(sig)
    stdout, stderr = finish(proc, idle_s=10)
    assert proc.returncode == 128 + sig, stdout + stderr
    assert f"stopped by {sig.name}" in stdout and "Traceback" not in stderr
    saved = sorted((out / "checkpoints").glob("step-*.pt"))
    assert saved, "a checkpoint was written on the way out"
    resumed = date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a, b = final_model(uninterrupted), final_model(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_nonfinite_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    out = tmp_path / "run"
    result = date(
        "scale",
        SPEC,
        "--batch",
        256,
        *SHORT,
        "-o",
        out,
        "--set",
        "train.checkpoint_every=3",
        "--set",
        "train.spike_guard=false",  # the stop itself (the guard's rollbacks: test_spike_guard)
        "--recipe",
        "tests.fault_recipes:lenet_digits_nan",
        env={"DATE_TEST_NAN_AT": "8"},
    )
    assert result.returncode == 3
    assert "the loss became non-finite (nan) at step 8" in result.stderr
    # the state after step 7 is finite and in memory: it is kept, so no work is lost
    assert "step-00000007.pt (step 7)" in result.stderr and "Traceback" not in result.stderr
    newest = sorted((out / "checkpoints").glob("step-*.pt"))[-1]
    payload = torch.load(newest, weights_only=True)
    assert payload["step"] == 7
    assert all(torch.isfinite(t).all() for t in payload["model"].values())


def test_resume_with_another_batch_is_refused_unless_replanned(uninterrupted, tmp_path):
    out = tmp_path / "run"
    assert date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--max-steps", 10).returncode == 0
    refused = date("scale", SPEC, "--batch", 128, *SHORT, "-o", out, "--resume")
    assert refused.returncode == 2
    assert "cannot resume from this checkpoint: it was written for batch 256" in refused.stderr
    assert "--force-replan" in refused.stderr and "Traceback" not in refused.stderr
    replanned = date(
        "scale",
        SPEC,
        "--batch",
        128,
        *SHORT,
        "-o",
        out,
        "--resume",
        "--force-replan",
        "--max-steps",
        22,
    )
    assert replanned.returncode == 0, replanned.stderr
    assert "continuing its weights at step 20 of the new plan" in replanned.stdout
    # the optimizer's state goes on, its settings are the new plan's, not the checkpoint's
    plan = json.loads((out / "plan.json").read_text())
    saved = torch.load(out / "checkpoints" / "step-00000022.pt", weights_only=False)
    for group in saved["optimizer"]["param_groups"]:
        assert group["alpha"] == plan["optimizer"]["options"]["alpha"] != 0.99 ** 16
        assert group["eps"] == plan["optimizer"]["options"]["eps"]
    assert max(g["initial_lr"] for g in saved["optimizer"]["param_groups"]) == plan["peak_lr"]


def test_a_new_run_does_not_overwrite_checkpoints(uninterrupted):
    result = date("scale", SPEC, "--batch", 256, *SHORT, "-o", uninterrupted)
    assert result.returncode == 2 and "already holds checkpoints" in result.stderr
    missing = date(
        "scale", SPEC, "--batch", 256, *SHORT, "-o", uninterrupted.parent / "empty", "--resume"
    )
    assert missing.returncode == 2 and "no checkpoint in" in missing.stderr


# ------------------------------------------------------------------ dry runs and bad input


def test_every_shipped_recipe_is_registered():
    from date_engine import load_spec
    from date_engine.recipes import get_recipe

    for path in sorted(RECIPES.glob("*.yaml")):
        name = load_spec(path).recipe
        assert get_recipe(name).name == name, path.name


def test_cuda_only_options_on_the_cpu_say_so_and_run_fp32(tmp_path):
    result = date("scale", SPEC, "--batch", 256, "--dry-run", "--precision", "bf16", "--compile")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "bf16 runs on CUDA only" in result.stdout
        and "--compile applies on CUDA only" in result.stdout
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch", 4096], "larger than the data set (1437 samples"),
        (["--batch", 256, "--nproc", 3], "does not divide evenly over 3 processes"),
        (
            ["--batch", 256, "--recipe", "no-such-recipe"],
            "unknown recipe 'no-such-recipe'; known recipes: bert-mlm, gnmt, gpt-char, "
            "lenet-digits",
        ),
        (
            ["--batch", 256, "--recipe", "tests.nowhere:thing"],
            "cannot load 'thing' from module 'tests.nowhere'",
        ),
        (["--batch", 256, "--precision", "fp64"],
         "'--precision': Value error, 'fp64' is not one of 'fp32', 'bf16', 'fp16'"),
    ],
)
def test_bad_input_exits_2_before_training(args, message, tmp_path):
    result = date("scale", SPEC, *args, "-o", tmp_path / "out")
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_of_earlier_rules_keeps_its_plan_on_resume(tmp_path):
    """A run begun under rules version 1 (k^0.75 for RMSprop without a probe, a plan with no
    rules_version) and resumed by this version keeps the plan it started with: the LR of every
    later step is that plan's; --force-replan would take today's."""
    from date_engine.plan import Plan
    from date_engine.runfolder import RunFolder
    from date_engine.train.checkpoint import save_atomic

    out = tmp_path / "run"
    assert date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--max-steps", 10).returncode == 0
    newest = sorted((out / "checkpoints").glob("step-*.pt"))[-1]
    payload = torch.load(newest, weights_only=False)
    old = {k: v for k, v in payload["plan"].items() if k not in ("rules_version", "lr_note")}
    old["peak_lr"], old["lr_exponent"] = 16 ** 0.75 * old["baseline_lr"], 0.75  # as 0.7 derived
    payload["plan"] = old
    for path in (out / "checkpoints").glob("step-*.pt"):
        path.unlink()
    save_atomic(RunFolder(out), payload["step"], payload, keep=2)
    kept = date("scale", SPEC, "--batch", 256, *SHORT, "-o", out, "--resume")
    assert kept.returncode == 0, kept.stderr
    assert "keeps the plan it started with" in " ".join((kept.stdout + kept.stderr).split())
    assert json.loads((out / "plan.json").read_text())["peak_lr"] == pytest.approx(old["peak_lr"])
    then = Plan.from_dict(old)
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    later = [r for r in logged if r.get("lr") is not None and r["step"] > 10]
    # the LR the trainer set and logged: plan.lr(s) through its scheduler, a few roundings
    assert later and all(r["lr"] == pytest.approx(then.lr(r["step"]), rel=float64_formula(4))
                         for r in later)
