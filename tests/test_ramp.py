"""`date.budget: ramp`: the batch ladder in the plan, the stream of samples across a change, and a
ramped run under torchrun killed right after a change, resumed bit for bit."""

from __future__ import annotations

import json
import math

import pytest
import torch

from date_engine.errors import PlanError
from date_engine.forecast import NoiseCurve
from date_engine.plan import BatchSplit, RunPlan, derive_plan, split_batch
from date_engine.probe import NoisePoint, Probe, baseline_identity
from date_engine.ramp import ladder, ramp
from date_engine.spec import parse_spec
from date_engine.train.sampling import MicroBatchSampler
from date_engine.train.trainer import stream_sizes
from tests.runs import SHORT, SPEC, date, final_model, metrics

RISING = NoiseCurve(a=500.0, beta=1.0, first=0.1, last=1.0)  # B_noise = 500·e


def _spec(**date_section):
    return parse_spec({
        "recipe": "lenet-mnist",
        "baseline": {"batch_size": 128, "lr": 1e-3, "warmup_epochs": 0.1, "epochs": 10,
                     "dataset_size": 60000, "optimizer": {"name": "rmsprop"}},
        "date": {"budget": "ramp", **date_section},
    })


def test_ladder_halves_the_target_down_to_the_baseline():
    assert ladder(4096, 128) == [128, 256, 512, 1024, 2048, 4096]
    assert ladder(3000, 128) == [375, 750, 1500, 3000]
    assert ladder(4096, 128, multiple_of=512) == [512, 1024, 2048, 4096]
    assert ladder(100, 128) == [100]


def test_each_rung_starts_where_the_noise_scale_reaches_it():
    stages = ramp(RISING, 4096, 128, 10.0, 60000)
    assert [s.batch for s in stages] == [128, 256, 512, 1024, 2048, 4096]
    assert [s.noise_at_start for s in stages[1:]] == pytest.approx([256, 512, 1024, 2048, 4096])
    for before, after in zip(stages, stages[1:]):  # contiguous, in whole steps and samples
        assert after.first_step == before.last_step + 1
        assert after.samples_before == before.samples_after
    # below the noise scale a stretch costs < 2× the baseline's epochs, and never less than them
    assert 10.0 < stages[-1].samples_after / 60000 < 20.0
    # a noise scale that never reaches the target ends the ramp below it
    flat = NoiseCurve(a=600.0, beta=0.0, first=0.1, last=1.0)
    assert [s.batch for s in ramp(flat, 4096, 128, 10.0, 60000)] == [512]


def test_the_plan_rederives_every_batch_value_per_stage():
    plan = derive_plan(_spec(), 4096, noise_curve=RISING)
    assert [s.batch for s in plan.ramp] == [128, 256, 512, 1024, 2048, 4096]
    for stage in plan.ramp:
        k = stage.batch / 128
        assert stage.peak_lr == pytest.approx(k**0.75 * 1e-3)
        assert stage.options["alpha"] == pytest.approx(0.99**k)
        assert stage.options["eps"] == pytest.approx(1e-8 / math.sqrt(k))
        assert plan.batch_at(stage.first_step) == plan.batch_at(stage.last_step) == stage.batch
        # the LR at a stage's steps is its own peak times the schedule's shape
        shape = plan.lr(stage.last_step) / stage.peak_lr
        assert 0 < shape <= 1
    assert plan.optimizer.options == plan.ramp[-1].options  # the target's, as without a ramp
    assert plan.warmup_epochs == pytest.approx(0.1)  # LEGW at the first rung (k = 1)
    assert plan.total_iterations == plan.ramp[-1].last_step
    assert plan.epoch(plan.total_iterations) == pytest.approx(plan.total_epochs)
    # the schedule is continuous in samples: a stage change moves the LR by the peaks' ratio
    change = plan.ramp[3].first_step
    ratio = plan.lr(change) / plan.lr(change - 1)
    assert ratio == pytest.approx(2**0.75, rel=0.02)
    symbols = [d.symbol for d in plan.derivations]
    assert {"B_j", "E_tot", "I"} <= set(symbols)
    # round trip through plan.json, and a refusal without a probe
    again = RunPlan.from_dict(json.loads(json.dumps(RunPlan(plan, _split(4096)).to_dict())))
    assert again.plan == plan
    with pytest.raises(PlanError, match="date probe"):
        derive_plan(_spec(), 4096)


def test_without_a_ramp_plans_are_unchanged():
    """Budgets other than ramp take none of the ramp's paths."""
    same = derive_plan(_spec(budget="same-epochs"), 4096, noise_curve=RISING)
    assert same.ramp == () and same.stage_at(1) is None and same.batch_at(5) == 4096
    assert same.samples_through(7) == 7 * 4096 and same.epoch(7) == 7 * 4096 / 60000


def _split(batch):
    return split_batch(batch, 1, None)


def test_every_sample_is_read_once_per_epoch_across_a_change():
    """Two processes, micro-batch 8, a ramp 16 → 32 → ... whose changes fall inside an epoch:
    the union of both processes' micro-batches over each epoch is the data set, once."""
    n = 1437
    spec = parse_spec({"recipe": "lenet-digits",
                       "baseline": {"batch_size": 16, "lr": 1e-3, "warmup_epochs": 0.5,
                                    "epochs": 10, "dataset_size": n,
                                    "optimizer": {"name": "rmsprop"}},
                       "date": {"budget": "ramp"}})
    plan = derive_plan(spec, 256, noise_curve=RISING, multiple_of=2)
    planned = RunPlan(plan, BatchSplit(8, 2, 16))
    assert [s.batch for s in plan.ramp] == [16, 32, 64, 128, 256]
    changes = [plan.epoch(s.first_step - 1) for s in plan.ramp[1:]]
    assert any(e % 1 > 0 for e in changes[:2])  # at least one change is mid-epoch
    steps = plan.ramp[-1].first_step + 3
    sizes = stream_sizes(planned, 0, steps)
    assert [m for m, _ in sizes] == [8] * 5
    reads = [list(MicroBatchSampler(n, sizes[0][0], 2, rank, 0, 0, sizes[0][1], sizes[1:]))
             for rank in (0, 1)]
    per_process = n // 2
    stream = [[i for batch in rank for i in batch] for rank in reads]
    samples = int(plan.samples_through(steps))
    assert sum(map(len, stream)) == samples
    for epoch in range(samples // (2 * per_process)):
        seen = [i for rank in stream for i in rank[epoch * per_process:(epoch + 1) * per_process]]
        assert len(seen) == len(set(seen)) == 2 * per_process
    # resuming at a step inside a later stage reads exactly the rest of the stream
    mid = plan.ramp[2].first_step + 1
    later = stream_sizes(planned, mid, steps)
    rest = list(MicroBatchSampler(n, later[0][0], 2, 0, 0, int(plan.samples_through(mid)) // 2,
                                  later[0][1], later[1:]))
    assert [i for b in rest for i in b] == stream[0][int(plan.samples_through(mid)) // 2:]


# ------------------------------------------------------------------ a ramped run, end to end

RAMP = ["--batch", 256, "--nproc", 2, "--micro-batch", 8, *SHORT, "--budget", "ramp",
        "--set", "train.checkpoint_every=4", "--set", "train.log_every=5"]


@pytest.fixture(scope="module")
def probe_file(tmp_path_factory):
    """A probe.json of lenet-digits (SHORT) whose curve is B_noise = 500·e: the ramp climbs
    16 → 256 within the first epoch."""
    spec = parse_spec({"recipe": "lenet-digits",
                       "baseline": {"batch_size": 16, "lr": 1e-3, "warmup_epochs": 0.5,
                                    "epochs": 10, "dataset_size": 1437,
                                    "optimizer": {"name": "rmsprop"}},
                       "date": {"lr_floor": 1e-6, "layer_ratio": {"mode": "dynamic"}},
                       "train": {"log_every": 20}})
    path = tmp_path_factory.mktemp("probe") / "probe.json"
    Probe(baseline=baseline_identity(spec, 1437), baseline_epochs=10.0, steps=90,
          baseline_steps=899, epochs=1.0, micro_batch=8, world_size=1, accumulation_steps=2,
          wall_seconds=1.0,
          points=(NoisePoint(0.25, 125.0, 1.0, 125.0, 2.0),
                  NoisePoint(1.0, 500.0, 1.0, 500.0, 1.0))).write(path)
    return path


@pytest.fixture(scope="module")
def ramped(probe_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("ramp") / "run"
    result = date("scale", SPEC, *RAMP, "--probe", probe_file, "--max-steps", 40, "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out, result


def test_a_ramped_run_trains_each_stage_at_its_batch(ramped):
    out, result = ramped
    plan = json.loads((out / "plan.json").read_text())
    batches = [s["batch"] for s in plan["ramp"]]
    assert batches[0] == 16 and batches[-1] == 256
    assert [s["accumulation_steps"] for s in plan["stage_splits"]] == [b // 16 for b in batches]
    logged = [x for x in metrics(out) if "loss" in x]
    for record in logged:
        stage = next(s for s in plan["ramp"] if record["step"] < s["first_step"] + s["steps"])
        assert record["batch"] == stage["batch"]
    assert "the batch grows to 32" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 40


def test_a_ramped_run_killed_after_a_change_resumes_bit_for_bit(ramped, probe_file, tmp_path):
    """torchrun, 2 processes, gloo: rank 0 is SIGKILLed in the step after a batch change (not a
    checkpoint step); torchrun restarts the job, which resumes from the checkpoint before it and
    ends where the uninterrupted run did."""
    out, _ = ramped
    plan = json.loads((out / "plan.json").read_text())
    stages, splits = plan["ramp"], plan["stage_splits"]
    change = next(s["first_step"] for s in stages[1:] if s["first_step"] % 4 not in (0, 1))
    calls = 0  # rank 0's loss computations up to and into the step after the change
    for step in range(1, change + 2):
        j = next(i for i, s in enumerate(stages) if step < s["first_step"] + s["steps"])
        calls += splits[j]["accumulation_steps"]
    killed = date("scale", SPEC, *RAMP, "--probe", probe_file, "--max-steps", 40,
                  "-o", tmp_path / "killed", "--max-restarts", 1,
                  "--recipe", "tests.fault_recipes:lenet_digits_killed",
                  env={"DATE_TEST_KILL_AT": str(calls)})
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert "resuming from" in killed.stdout
    a, b = final_model(out), final_model(tmp_path / "killed")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert metrics(tmp_path / "killed") == metrics(out)


def test_date_plan_shows_the_ramp(probe_file):
    result = date("plan", SPEC, *SHORT, "--batch", 256, "--budget", "ramp", "--probe", probe_file)
    assert result.returncode == 0, result.stderr
    assert "Batch ramp" in result.stdout and "16 → 32 → 64 → 128 → 256" in result.stdout
    none = date("plan", SPEC, *SHORT, "--batch", 256, "--budget", "ramp")
    assert none.returncode == 2 and "date probe" in none.stderr
