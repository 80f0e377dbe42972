"""The trainer's parts on their own: job environment, sampling, checkpoints, recipes, metrics."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import sys
import textwrap
import types

import pytest
import torch

from date_engine import DateError
from date_engine.recipes import get_recipe, list_recipes
from date_engine.runfolder import MetricsLog, RunFolder
from date_engine.train import checkpoint as ckpt
from date_engine.train.launch import LaunchOptions, torchrun_arguments
from date_engine.train.runtime import first_host, job_environment
from date_engine.train.sampling import MicroBatchSampler


def test_job_environment_from_torchrun_and_slurm():
    assert job_environment({}).launcher == "none"
    tr = job_environment({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"})
    assert (tr.rank, tr.world_size, tr.local_rank, tr.launcher) == (3, 8, 1, "torchrun")
    sl = job_environment({"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1"})
    assert (sl.rank, sl.world_size, sl.local_rank, sl.launcher) == (5, 16, 1, "slurm")
    assert job_environment({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}).launcher == "none"


@pytest.mark.parametrize("nodelist, host", [
    ("gpu[07-09,12],cpu1", "gpu07"), ("node001", "node001"), ("a1,b2", "a1"), ("n[3]", "n3")])
def test_first_host_of_a_slurm_nodelist(nodelist, host):
    assert first_host(nodelist) == host


def test_torchrun_arguments():
    path = "/run/config.json"
    single = torchrun_arguments(path, LaunchOptions(nproc=4, max_restarts=2))
    assert (
        single[:4] == ["--nproc-per-node", "4", "--max-restarts", "2"] and "--standalone" in single
    )
    assert single[-4:] == ["-m", "date_engine.train.worker", "--config", path]
    multi = torchrun_arguments(
        path, LaunchOptions(nproc=8, nnodes=2, rdzv_endpoint="h:29400", rdzv_id="j")
    )
    assert multi[6:14] == [
        "--nnodes",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "h:29400",
        "--rdzv-id",
        "j",
    ]
    static = torchrun_arguments(
        path, LaunchOptions(nproc=8, nnodes=2, node_rank=1, master_addr="h")
    )
    assert "--node-rank" in static and "--master-addr" in static and "--standalone" not in static


@pytest.mark.parametrize("n", [40, 41])
@pytest.mark.parametrize("world, micro", [(1, 8), (2, 4), (4, 2)])
def test_global_batches_do_not_depend_on_the_split(world, micro, n):
    """Global batch = the union over processes of their micro-batches for a step, the same for
    every split, across epochs too, also where the epoch does not divide over the processes (41
    samples: a process count that dropped the remainder would start the next epoch elsewhere)."""
    batch, steps = 8, 12  # 12 steps of 8 cross two epochs of 40

    def global_batches(world, micro):
        accumulation = batch // (world * micro)
        streams = [
            list(MicroBatchSampler(n, micro, world, r, seed=3, start=0, count=steps * accumulation))
            for r in range(world)
        ]
        return [
            sorted(
                i
                for s in streams
                for mb in s[k * accumulation : (k + 1) * accumulation]
                for i in mb
            )
            for k in range(steps)
        ]

    assert global_batches(world, micro) == global_batches(1, 8)


def test_sampler_resumes_mid_stream_and_reshuffles_each_epoch():
    full = list(MicroBatchSampler(30, 4, 2, 1, seed=0, start=0, count=10))
    assert list(MicroBatchSampler(30, 4, 2, 1, seed=0, start=24, count=7)) == full[3:]
    epochs = [MicroBatchSampler(30, 4, 2, 1, 0, 0, 1).epoch_indices(e) for e in (0, 1)]
    assert sorted(epochs[0]) == list(range(30)) == sorted(epochs[1])
    assert epochs[0] != epochs[1] and epochs[0] != list(range(30))


def _payload(step):
    return {
        "format": ckpt.FORMAT,
        "step": step,
        "model": {"w": torch.ones(2) * step},
        "optimizer": {},
        "plan": {},
        "spec_fingerprint": "x",
        "ranks": [{"rng": ckpt.capture_rng()}],
    }


def test_checkpoints_are_kept_newest_first_and_a_damaged_one_is_skipped(tmp_path):
    run = RunFolder(tmp_path)
    for step in (2, 4, 6):
        ckpt.save_atomic(run, step, _payload(step), keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-00000004.pt", "step-00000006.pt"]
    (tmp_path / "checkpoints" / "step-00000006.pt").write_bytes(b"truncated")
    found = ckpt.newest_valid(run)
    assert found.path.name == "step-00000004.pt" and found.payload["step"] == 4
    assert found.skipped == ("step-00000006.pt: has no checksum trailer, which the other "
                             "checkpoints here carry (cut short or damaged)",)
    assert ckpt.newest_valid(RunFolder(tmp_path / "nothing")) is None


def test_a_checkpoint_is_torch_saves_bytes_then_its_checksum_and_is_read_without_the_trailer(
    tmp_path,
):
    """The file save_atomic streams: torch.save's bytes, a JSON record with their SHA-256, the
    record's length and a magic word. Reading checks the hash and loads the bytes before the
    record; a flipped byte is refused, and so is a file whose trailer was cut off (with a flipped
    byte or without) beside checkpoints that carry one; alone (a version before the trailer's), it
    still loads."""
    run = RunFolder(tmp_path)
    for step in (2, 3):
        ckpt.save_atomic(run, step, _payload(step), keep=2)
    path = run.checkpoint_path(3)
    data = path.read_bytes()
    length, magic = struct.unpack("<Q8s", data[-16:])
    record, body = json.loads(data[-16 - length : -16]), data[: -16 - length]
    assert magic == b"DATECKPT" and record["step"] == 3
    assert record["sha256"] == hashlib.sha256(body).hexdigest()
    assert torch.load(io.BytesIO(body), weights_only=True)["step"] == 3
    assert torch.equal(ckpt.newest_valid(run).payload["model"]["w"], torch.full((2,), 3.0))

    flipped = bytearray(data)
    flipped[len(body) // 2] ^= 0xFF
    path.write_bytes(bytes(flipped))
    found = ckpt.newest_valid(run)
    assert found.payload["step"] == 2 and found.skipped == (
        "step-00000003.pt: its bytes do not match the checksum written with it (damaged)",
    )
    for cut in (bytes(flipped[: len(body)]), body):
        path.write_bytes(cut)
        found = ckpt.newest_valid(run)
        assert found.payload["step"] == 2 and found.skipped == (
            "step-00000003.pt: has no checksum trailer, which the other checkpoints here carry "
            "(cut short or damaged)",)
    run.checkpoint_path(2).unlink()
    found = ckpt.newest_valid(run)
    assert found.payload["step"] == 3 and found.skipped == ()


def test_rng_state_round_trips():
    state = ckpt.capture_rng()
    a = torch.rand(3)
    ckpt.restore_rng(state)
    assert torch.equal(torch.rand(3), a)


def test_mismatch_is_described():
    plan = {
        "target_batch": 256,
        "world_size": 2,
        "micro_batch": 128,
        "accumulation_steps": 1,
        "x": 1,
    }
    assert ckpt.describe_mismatch(plan, dict(plan), "f", "f") is None
    other = {**plan, "target_batch": 512, "micro_batch": 256}
    assert "written for batch 256 = 128 × 2 processes × 1, not batch 512" in ckpt.describe_mismatch(
        plan, other, "f", "f"
    )
    assert "another spec" in ckpt.describe_mismatch(plan, plan, "f", "g")
    # a version that words the plan's notes anew still resumes it; a number that trains differs
    worded = {**plan, "lr_note": "", "derivations": [{"note": "old words"}]}
    assert ckpt.describe_mismatch(worded, {**worded, "lr_note": "new", "derivations": [
        {"note": "new words"}]}, "f", "f") is None
    assert ckpt.describe_mismatch(worded, {**worded, "x": 2}, "f", "f") == \
        "its plan differs from this run's"


def test_recipe_from_module_function_and_entry_point(tmp_path, monkeypatch):
    package = tmp_path / "my_recipes.py"
    package.write_text(
        textwrap.dedent("""
        from dataclasses import replace
        from date_engine.recipes import get_recipe

        def tiny():
            return replace(get_recipe("lenet-digits"), name="tiny")
    """)
    )
    dist_info = tmp_path / "my_recipes-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-recipes\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text("[date_engine.recipes]\ntiny = my_recipes:tiny\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert get_recipe("my_recipes:tiny").name == "tiny"
    assert get_recipe("tiny").name == "tiny"  # through the entry point
    assert "tiny" in [r.name for r in list_recipes()]
    with pytest.raises(DateError, match="a recipe function takes no arguments"):
        get_recipe("textwrap:dedent")
    with pytest.raises(DateError, match="did not produce a date_engine.recipes.Recipe"):
        get_recipe("os:getcwd")


def test_recipe_lookup_does_not_import_torch():
    import subprocess

    code = (
        "import sys\nfrom date_engine.recipes import get_recipe\n"
        "r = get_recipe('lenet-digits')\nprint(r.dataset_size, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1437", "False"]


def test_metrics_log_drops_lines_after_the_resumed_step_and_feeds_tensorboard(
    tmp_path, monkeypatch
):
    scalars = []

    class Writer:
        def __init__(self, folder):
            pass

        def add_scalar(self, key, value, step):
            scalars.append((key, value, step))

        def close(self):
            pass

    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = Writer
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    log = MetricsLog(RunFolder(tmp_path))
    assert log.tensorboard
    for step in (10, 20, 30):
        log.write({"step": step, "loss": 1.0 / step, "grad_norm": None})
    log.write({"step": 30, "eval": {"accuracy": 90.0}})
    log.close()
    assert ("loss", 0.1, 10) in scalars and ("eval/accuracy", 90.0, 30) in scalars
    resumed = MetricsLog(RunFolder(tmp_path), resume_step=20)
    resumed.close()
    assert [
        line.count('"step"') for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ] == [1, 1]


def test_cpu_training_flushes_denormals_and_leaves_them_as_it_found_them(monkeypatch):
    """A run flushes denormal floats while it trains on the CPU; its end restores the mode it
    found, so a run inside the user's own process (or a test's) changes nothing after it."""
    from date_engine.train.runtime import flushes_denormals, setup, teardown

    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(key, raising=False)
    try:
        for before in (False, True):
            torch.set_flush_denormal(before)
            # made after the flag is set: a denormal built while flushing is already zero
            tiny = torch.tensor([1e-39], dtype=torch.float32)  # below fp32's 1.18e-38
            assert flushes_denormals() == before
            runtime = setup(force_cpu=True)
            assert runtime.device.type == "cpu" and flushes_denormals()
            teardown(runtime)
            assert flushes_denormals() == before
            if not before:
                assert (tiny * 1.0).item() != 0.0
    finally:
        torch.set_flush_denormal(False)


def test_a_step_with_overflowing_gradients_is_non_finite_even_when_the_loss_is_not():
    from date_engine.train.runtime import Runtime
    from date_engine.train.step import agree

    rt = Runtime(0, 1, 0, torch.device("cpu"), None, "fp32", False, [])
    loss = torch.tensor(5e34)
    assert not agree(rt, loss, False, False).nonfinite
    assert not agree(rt, loss, False, False, grad_norm=torch.tensor(3.0)).nonfinite
    assert agree(rt, loss, False, False, grad_norm=torch.tensor(float("inf"))).nonfinite
    assert agree(rt, torch.tensor(float("nan")), False, False).nonfinite
    verdict = agree(rt, loss, True, True, noise=torch.tensor([2.0, 1.0]))
    assert (verdict.stop, verdict.save, verdict.noise) == (True, True, (2.0, 1.0))
    for size, bad in ((1e30, False), (float("inf"), True), (float("nan"), True)):
        verdict = agree(rt, loss, False, False, state_sum=torch.tensor(size))
        assert (verdict.nonfinite, verdict.state_nonfinite) == (bad, bad), size


def test_the_state_sum_reads_every_parameter_buffer_and_optimizer_state():
    """StepRunner.state_sum: the sum over what a checkpoint would hold, NaN/inf when any is."""
    from date_engine.optim import DATE
    from date_engine.recipes import get_recipe
    from date_engine.train.runtime import Runtime
    from date_engine.train.step import StepRunner

    rt = Runtime(0, 1, 0, torch.device("cpu"), None, "fp32", False, [])
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    opt = DATE(torch.optim.Adam(model.parameters(), lr=0.1))
    runner = StepRunner(model, model, opt, None, get_recipe("lenet-digits"), None, rt, 1)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    values = [t for t in (*model.parameters(), *model.buffers(),
                          *(t for s in opt.state.values() for t in s.values()))
              if t.is_floating_point()]
    assert runner.state_sum().item() == pytest.approx(sum(v.sum().item() for v in values))
    for tensor in (model[1].running_var, opt.state[model[0].weight]["exp_avg_sq"]):
        kept = tensor.clone()
        for bad in (float("nan"), float("inf"), -float("inf")):
            tensor[0] = bad
            assert not torch.isfinite(runner.state_sum()), bad
        tensor.copy_(kept)
    assert torch.isfinite(runner.state_sum())


def test_more_processes_than_cores_are_said_to_take_turns(monkeypatch):
    """`--nproc 4` on 2 cores once started 4 workers without a word."""
    import os

    from date_engine.train.runtime import setup

    cores = os.cpu_count() or 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cores + 1))
    notes = setup(force_cpu=True).notes
    assert any(f"{cores + 1} processes share this machine's {cores} CPU cores" in n
               for n in notes), notes
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cores))
    assert not any("share this machine" in n for n in setup(force_cpu=True).notes)


def test_the_summary_says_what_its_wall_time_covers():
    from rich.console import Console

    from date_engine import load_spec
    from date_engine.planning import plan_for
    from date_engine.runfolder import RunSummary
    from date_engine.view.progress import render_summary
    from tests.conftest import RECIPES

    planned = plan_for(load_spec(RECIPES / "lenet-digits.yaml"), 256)
    summary = RunSummary("lenet-digits", 337, 337, None, "accuracy", 0.96, 7.5, 12000.0, None,
                         planned.to_dict())
    console = Console(width=200, record=True)
    console.print(render_summary(summary, planned.plan, planned.split))
    text = console.export_text()
    assert "7.5 s: this attempt's steps, checkpoints and evaluations (not start-up" in text


def test_only_the_time_limits_signal_requeues_and_only_the_first_task(tmp_path, capsys,
                                                                     monkeypatch):
    """requeue_at_time_limit runs `scontrol requeue JOB` (here stand-ins for scontrol and squeue
    that record their argv and say the time left) for a run stopped by SIGUSR1 in the job's
    first task within REQUEUE_WINDOW_S of its time limit; a stop by SIGTERM (scancel), a
    finished run, another task, no Slurm job, a SIGUSR1 long before the limit or to a job
    without one requeues nothing; a failed requeue says what to do."""
    import os
    import signal

    from date_engine.train.launch import TIME_LIMIT_CODE, requeue_at_time_limit

    monkeypatch.setattr(signal, "signal", lambda sig, handler: signal.SIG_DFL)  # this process's
    record = tmp_path / "argv"
    for name, body in (("scontrol", f'echo "$@" >> {record}\n[ "$2" != 13 ]'),
                       ("squeue", 'echo "$LEFT"')):
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "SLURM_JOB_ID": "12",
           "SLURM_PROCID": "0", "LEFT": "2:55"}
    assert requeue_at_time_limit(TIME_LIMIT_CODE, env)
    assert record.read_text() == "requeue 12\n"
    assert "checkpointed: requeueing it" in capsys.readouterr().err
    for code, changed in ((143, {}), (0, {}), (TIME_LIMIT_CODE, {"SLURM_PROCID": "1"}),
                          (TIME_LIMIT_CODE, {"SLURM_JOB_ID": ""}),
                          (TIME_LIMIT_CODE, {"LEFT": "UNLIMITED"}),
                          (TIME_LIMIT_CODE, {"LEFT": "1-00:00:00"}),
                          (TIME_LIMIT_CODE, {"LEFT": "45:00"})):
        assert not requeue_at_time_limit(code, {**env, **changed}), (code, changed)
    assert record.read_text() == "requeue 12\n"
    assert requeue_at_time_limit(TIME_LIMIT_CODE, {**env, "LEFT": "0-00:29:00"})
    assert not requeue_at_time_limit(TIME_LIMIT_CODE, {**env, "SLURM_JOB_ID": "13"})
    assert "could not requeue Slurm job 13" in capsys.readouterr().err
