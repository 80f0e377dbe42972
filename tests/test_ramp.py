"""`date.budget: ramp`: the batch ladder in the plan, a measured ramp's moves, the stream of samples
across a change, and a ramped run under torchrun killed right after a change, resumed bit for
bit."""

from __future__ import annotations

import json
import math
import re
import sys

import pytest
import torch

from date_engine.branches import CriticalBatch, Measurement, TargetSettings
from date_engine.errors import PlanError
from date_engine.forecast import CriticalCurve, NoiseCurve, epochs_factor
from date_engine.noise import NoiseScale
from date_engine.plan import derive_plan
from date_engine.probe import NoisePoint, Probe, baseline_identity
from date_engine.ramp import Change, Follower, climb, follow, ladder, move, ramp, run_samples
from date_engine.runplan import BatchSplit, RunPlan, split_batch, stage_split
from date_engine.spec import parse_spec
from date_engine.train.sampling import MicroBatchSampler
from tests.runs import SHORT, SPEC, date, final_model, metrics

RISING = NoiseCurve(a=500.0, beta=1.0, first=0.1, last=1.0,  # B_noise = 500·e, and an LR
                    lr_checked=True)                        # check that found room: k^0.75


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
    # bound: besides the peaks' ratio, one step of the linear decay, whose shape falls by that
    # step's samples over the samples left to the end (1.3e-3 here)
    assert ratio == pytest.approx(2**0.75, rel=0.02)
    symbols = [d.symbol for d in plan.derivations]
    assert {"B_j", "E_tot", "I"} <= set(symbols)
    # round trip through plan.json, and a refusal without a probe
    again = RunPlan.from_dict(json.loads(json.dumps(RunPlan(plan, _split(4096)).to_dict())))
    assert again.plan == plan
    with pytest.raises(PlanError, match="date probe"):
        derive_plan(_spec(), 4096)


def test_a_measured_ramp_moves_up_where_the_run_says():
    planned = ramp(RISING, 4096, 128, 10.0, 60000)
    total = planned[-1].samples_after
    assert follow(planned, (), total) == planned  # nothing measured: the planned ramp, exactly
    # at step 100 (the plan: 256 at step 118) the run measured 600: it skips to 512
    moved = follow(planned, (Change(100, 512, 600.0),), total)
    assert [(s.batch, s.first_step, s.measured) for s in moved[:2]] == [(128, 1, False),
                                                                     (512, 100, True)]
    assert moved[1].noise_at_start == 600.0 and moved[1].samples_before == 99 * 128
    for before, after in zip(moved, moved[1:]):  # contiguous; later rungs where planned
        assert after.first_step == before.last_step + 1
        assert after.samples_before == before.samples_after
    for stage in moved[2:]:
        rung = next(r for r in planned if r.batch == stage.batch)
        assert 0 <= stage.samples_before - rung.samples_before < 512 * 2  # the first step past
    assert total <= moved[-1].samples_after < total + 4096  # the same samples in all
    assert moved[-1].last_step < planned[-1].last_step  # in fewer steps
    # a planned move that came first stays; a change can only go up, after a step of its rung
    later = follow(planned, (Change(planned[2].first_step + 3, 2048, 2500.0),), total)
    assert [s.batch for s in later] == [128, 256, 512, 2048, 4096]
    for bad in (Change(100, 128, 9.0), Change(1, 256, 300.0)):
        with pytest.raises(ValueError, match="cannot follow"):
            follow(planned, (bad,), total)


def test_climb_takes_the_largest_rung_the_noise_has_reached():
    rungs = [128, 256, 512, 1024]
    assert climb(rungs, 128, 700.0) == 512
    assert climb(rungs, 512, 700.0) is None and climb(rungs, 128, 200.0) is None
    assert climb(rungs, 128, None) is None and climb(rungs, 128, math.nan) is None
    assert climb(rungs, 256, 1e9) == 1024
    # reach ρ: a rung is reached once the noise scale is rung / ρ
    assert climb(rungs, 128, 300.0, reach=2.0) == 512 and climb(rungs, 128, 300.0) == 256
    assert climb(rungs, 128, 300.0, reach=0.5) is None
    noise = NoiseScale(half_life=1000.0)
    noise.update(4.0, 2.0, 64, 128)
    assert not noise.settled  # a settled estimate needs a half-life of samples
    for _ in range(8):
        noise.update(4.0, 2.0, 64, 128)
    assert noise.settled


def test_the_noise_scale_has_risen_only_above_twice_its_lowest_measurable_value():
    """An LSTM's measured noise starts high and falls before it rises: a ramp that moved on the
    fall put batch 2048 at 0.1 epochs and lost 1.4 points (docs/noise.md)."""
    noise = NoiseScale(half_life=256.0)
    for trace in (4000.0, 3000.0, 2000.0, 1000.0, 500.0):  # falling: never risen
        for _ in range(6):
            noise.update(*_norms(grad_sq=1.0, trace=trace), 64, 128)
        assert noise.settled and not noise.risen
    low = noise.lowest
    assert low == noise.scale and low < 1000  # falling: the lowest is the latest
    for _ in range(12):
        noise.update(*_norms(grad_sq=1.0, trace=3 * low), 64, 128)
    assert noise.risen and noise.lowest == low
    # the lowest value is part of the state a checkpoint keeps
    again = NoiseScale(half_life=256.0)
    again.load_state_dict(noise.state_dict())
    assert again.lowest == low and again.risen


def test_a_noise_scale_hidden_in_the_noise_is_not_measurable():
    """On its initial plateau an LSTM's |G|² estimates scatter around ~0 (two micro-batches per
    step): the ratio reads 800 to 35,000 at random. The average's standard error says so."""
    noise = NoiseScale(half_life=128 * 20)
    for i in range(60):  # |G|² estimates of +1.0 and -0.9: mean 0.05, spread 0.95
        noise.update(*_norms(grad_sq=1.0 if i % 2 else -0.9, trace=100.0), 64, 128)
    estimate = noise.estimate
    assert noise.settled and estimate.scale is not None and estimate.scale > 1000
    assert estimate.significance < 1 and not noise.measurable and noise.lowest is None
    for _ in range(120):  # the gradient emerges: every estimate near 1
        noise.update(*_norms(grad_sq=1.0, trace=100.0), 64, 128)
    assert noise.estimate.significance > NoiseScale.SIGNIFICANCE and noise.measurable
    assert noise.lowest == noise.scale  # counted from here on, and falling towards 100
    again = NoiseScale(half_life=128 * 20)  # the error is part of a checkpoint's state
    again.load_state_dict(noise.state_dict())
    assert again.estimate == noise.estimate


def test_a_noise_scale_that_has_risen_stays_trusted_when_its_signal_fades():
    """Late in a LeNet's training, at batch 1024, |G|² shrinks beside the noise and falls below 3
    standard errors: the ramp reads the scale on (large, as it is), having once seen it measurable
    and risen. On the initial plateau, before any rise, the same readings are not trusted."""
    noise = NoiseScale(half_life=128 * 20)
    for i in range(60):  # the plateau: not measurable, never risen, not trusted
        noise.update(*_norms(grad_sq=1.0 if i % 2 else -0.9, trace=100.0), 64, 128)
    assert not noise.trusted and not noise.has_risen
    for trace in (100.0, 400.0):  # emerges at ~100, then rises to ~400
        for _ in range(120):
            noise.update(*_norms(grad_sq=1.0, trace=trace), 64, 128)
    assert noise.risen and noise.trusted
    for i in range(120):  # the signal fades into the noise: |G|² ~0.3 ± 1, the scale large
        noise.update(*_norms(grad_sq=1.3 if i % 2 else -0.7, trace=400.0), 64, 128)
    assert not noise.measurable and not noise.risen
    assert noise.trusted and noise.scale > 1000
    again = NoiseScale(half_life=128 * 20)  # part of a checkpoint's state
    again.load_state_dict(noise.state_dict())
    assert again.trusted
    old = {k: v for k, v in noise.state_dict().items() if k != "has_risen"}
    again.load_state_dict(old)  # a checkpoint from before it was kept
    assert not again.trusted


def _norms(grad_sq: float, trace: float) -> tuple[float, float]:
    """The mean squared micro-batch norm (64 samples) and the step's squared norm (128) whose
    unbiased estimates are ``grad_sq`` and ``trace``."""
    return grad_sq + trace / 64, grad_sq + trace / 128


def test_a_ramp_with_a_longer_reach_moves_up_earlier():
    near, far = (ramp(RISING, 4096, 128, 10.0, 60000, reach=r) for r in (1.0, 2.0))
    assert [r.batch for r in near] == [r.batch for r in far]
    for a, b in zip(near[1:], far[1:]):
        assert b.first_step < a.first_step  # each rung starts earlier ...
    assert far[-1].last_step < near[-1].last_step  # ... in fewer steps
    assert far[-1].samples_after > near[-1].samples_after  # for more samples
    rungs = ladder(4096, 128)
    assert move(near, rungs, 50, 300.0, reach=2.0) == Change(51, 512, 300.0)


def test_a_run_moves_where_its_noise_scale_passes_a_rung_the_plan_has_not_reached():
    planned = ramp(RISING, 4096, 128, 10.0, 60000)
    rungs = ladder(4096, 128)
    assert move(planned, rungs, 50, 600.0) == Change(51, 512, 600.0)
    assert move(planned, rungs, 50, 200.0) is None  # below the next rung: stay
    # where the plan moves at the next step anyway, only a larger batch is a move
    before = planned[1].first_step - 1
    assert move(planned, rungs, before, 300.0) is None
    assert move(planned, rungs, before, 1100.0) == Change(before + 1, 1024, 1100.0)
    assert move(planned, rungs, planned[-1].last_step, 1e9) is None  # the run's last step


def test_a_measured_plan_is_the_plan_of_its_moves():
    spec = _spec()
    planned = derive_plan(spec, 4096, noise_curve=RISING)
    assert planned.ramp_mode == "measured" and planned.ramp_changes == ()
    assert planned.ramp == derive_plan(_spec(ramp="planned"), 4096, noise_curve=RISING).ramp
    changes = (Change(60, 1024, 1100.0),)
    moved = derive_plan(spec, 4096, noise_curve=RISING, ramp_changes=changes)
    assert moved.ramp_changes == changes and moved.total_epochs == planned.total_epochs
    assert moved.total_iterations < planned.total_iterations
    assert moved.total_iterations == moved.ramp[-1].last_step
    # the LR is the stage's peak times the same shape of the samples seen
    for step in (59, 60, 61, moved.ramp[2].first_step, moved.total_iterations):
        stage = moved.stage_at(step)
        e, w, total = moved.epoch(step), moved.warmup_epochs, moved.total_epochs
        shape = e / w if e < w else (total - e) / (total - w)
        assert moved.lr(step) == pytest.approx(max(stage.peak_lr * shape, moved.lr_floor))
    assert moved.batch_at(60) == 1024 and moved.stage_at(60).options["alpha"] == pytest.approx(
        0.99**8)
    again = RunPlan.from_dict(json.loads(json.dumps(RunPlan(moved, _split(4096)).to_dict())))
    assert again.plan == moved and again.plan.ramp_changes == changes
    with pytest.raises(ValueError, match="measured"):
        derive_plan(_spec(ramp="planned"), 4096, noise_curve=RISING, ramp_changes=changes)
    # its stages give every step two or more gradients, so that the noise scale is measured
    run = RunPlan(moved, split_batch(4096, 1, 4096))
    assert run.split_at(1) == BatchSplit(64, 1, 2)
    assert stage_split(BatchSplit(64, 2, 1), 256, 2) == BatchSplit(64, 2, 2)
    assert stage_split(BatchSplit(4096, 1, 1), 256) == BatchSplit(256, 1, 1)


def test_a_move_rederives_the_plan_from_the_curve_it_holds(tmp_path):
    """What the trainer does at a measured ramp's move: plan_for with the moves and the
    curve its plan holds, reading no probe.json (one moved away during a long run broke the
    first move), to the same plan as derive_plan's; the follower climbs the same ladder."""
    from date_engine.planning import plan_for
    from date_engine.ramp import Follower

    spec = _spec(probe=str(tmp_path / "gone" / "probe.json"))  # no such file
    changes = (Change(60, 1024, 1100.0),)
    moved = plan_for(spec, 4096, ramp_changes=changes, noise_curve=RISING)
    assert moved.plan == derive_plan(spec, 4096, noise_curve=RISING, ramp_changes=changes)

    class Noise:
        trusted, scale = True, 5000.0

    plan = moved.plan
    follower = Follower(Noise(), plan, 1)
    assert follower.rungs == ladder(4096, 128)
    assert follower.after(61, plan.ramp, plan.ramp_reach) == Change(62, 4096, 5000.0) == move(
        plan.ramp, ladder(4096, 128), 61, 5000.0, plan.ramp_reach)
    Noise.trusted = False
    assert follower.after(61, plan.ramp, plan.ramp_reach) is None


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
    sizes = planned.stream(0, steps)
    assert [m for m, _ in sizes] == [8] * 5
    reads = [list(MicroBatchSampler(n, sizes[0][0], 2, rank, 0, 0, sizes[0][1], sizes[1:]))
             for rank in (0, 1)]
    stream = [i for a, b in zip(*reads) for pair in zip(a, b) for i in pair]  # rounds, in order
    samples = int(plan.samples_through(steps))
    assert len(stream) == samples
    for epoch in range(samples // n):
        seen = stream[epoch * n:(epoch + 1) * n]
        assert len(seen) == len(set(seen)) == n
    # resuming at a step inside a later stage reads exactly the rest of the stream
    mid = plan.ramp[2].first_step + 1
    later = planned.stream(mid, steps)
    rest = list(MicroBatchSampler(n, later[0][0], 2, 0, 0, int(plan.samples_through(mid)),
                                  later[0][1], later[1:]))
    mine = [i for batch in reads[0] for i in batch]
    assert [i for b in rest for i in b] == mine[int(plan.samples_through(mid)) // 2:]


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
    result = date("scale", SPEC, *RAMP, "--probe", probe_file, "--max-steps", 40, "-o", out,
                  "--recipe", "tests.fault_recipes:lenet_digits")  # moves without the gate
    assert result.returncode == 0, result.stdout + result.stderr
    return out, result


@pytest.mark.slow
def test_a_ramped_run_trains_each_stage_at_its_batch(ramped, probe_file):
    """The default, measured ramp: the run moves up before the probe's plan where its own noise
    scale says, trains each stage at its batch, and leaves the plan it ran in plan.json."""
    out, result = ramped
    plan = json.loads((out / "plan.json").read_text())
    batches = [s["batch"] for s in plan["ramp"]]
    assert batches[0] == 16 and batches[-1] == 256
    assert [s["accumulation_steps"] for s in plan["stage_splits"]] == [b // 16 for b in batches]
    measured = [s for s in plan["ramp"] if s["measured"]]
    assert measured and all(s["noise_at_start"] >= s["batch"] for s in measured)
    ahead = json.loads(date("plan", SPEC, *RAMP, "--probe", probe_file, "--json").stdout)
    assert ahead["ramp_mode"] == "measured" and not any(s["measured"] for s in ahead["ramp"])
    assert plan["total_iterations"] < ahead["total_iterations"]  # every early move saves steps
    assert plan["total_epochs"] == ahead["total_epochs"]  # over the same samples
    logged = [x for x in metrics(out) if "loss" in x]
    for record in logged:
        stage = next(s for s in plan["ramp"] if record["step"] < s["first_step"] + s["steps"])
        assert record["batch"] == stage["batch"]
    assert "the batch grows to 32" in result.stdout
    assert f"the batch grows to {measured[0]['batch']} (the measured noise scale reached" \
        in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 40 and summary["plan"]["ramp"] == plan["ramp"]
    assert re.search(r"batch ramp +│ 16 → 32 \(step 7\) → .*\d+ \(step \d+, measured\)",
                     result.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["first", "last"])
def test_a_ramped_run_killed_after_a_change_resumes_bit_for_bit(ramped, probe_file, tmp_path,
                                                                 which):
    """torchrun, 2 processes, gloo: rank 0 is SIGKILLed in the step after a batch change;
    torchrun restarts the job, which resumes from the checkpoint before it and ends where the
    uninterrupted run did. first: the first change (resumed from before it, the run decides its
    moves again); last: the last measured move (resumed from a checkpoint whose plan holds the
    moves before it)."""
    out, _ = ramped
    plan = json.loads((out / "plan.json").read_text())
    stages, splits = plan["ramp"], plan["stage_splits"]
    if which == "first":
        change = next(s["first_step"] for s in stages[1:] if s["first_step"] % 4 not in (0, 1))
    else:
        change = [s["first_step"] for s in stages if s["measured"]][-1]
    calls = 0  # rank 0's loss computations up to and into the step after the change
    for step in range(1, change + 2):
        j = next(i for i, s in enumerate(stages) if step < s["first_step"] + s["steps"])
        calls += splits[j]["accumulation_steps"]
    killed = date("scale", SPEC, *RAMP, "--probe", probe_file, "--max-steps", 40,
                  "-o", tmp_path / "killed", "--max-restarts", 1,
                  "--recipe", "tests.fault_recipes:lenet_digits_killed",
                  env={"DATE_TEST_KILL_AT": str(calls)})
    assert killed.returncode == 0, killed.stdout + killed.stderr
    resumed = int(re.search(r"resuming from .*\(step (\d+)\)", killed.stdout).group(1))
    if which == "last":
        assert any(s["measured"] and s["first_step"] <= resumed for s in stages)
    a, b = final_model(out), final_model(tmp_path / "killed")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert metrics(tmp_path / "killed") == metrics(out)
    assert json.loads((tmp_path / "killed" / "plan.json").read_text()) == plan


@pytest.mark.slow
def test_a_default_run_folder_names_its_budget(probe_file, tmp_path):
    """A ramp run was runs/lenet-digits-B256-2 beside the same-epochs run runs/...-B256."""
    from tests.runs import run_group

    for budget in ("hold", "ramp"):
        result = run_group([sys.executable, "-m", "date_engine", "scale", SPEC, *SHORT, "--batch",
                            256, "--budget", budget, "--probe", probe_file, "--max-steps", 1],
                           cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == \
        ["lenet-digits-B256-hold", "lenet-digits-B256-ramp"]


@pytest.mark.slow
def test_date_plan_shows_the_ramp(probe_file):
    result = date("plan", SPEC, *SHORT, "--batch", 256, "--budget", "ramp", "--probe", probe_file)
    assert result.returncode == 0, result.stderr
    assert "Batch ramp" in result.stdout and "16 → 32 → 64 → 128 → 256" in result.stdout
    far = date("plan", SPEC, *SHORT, "--batch", 256, "--budget", "ramp", "--probe", probe_file,
               "--set", "date.ramp_reach=2", "--json")
    assert json.loads(far.stdout)["ramp_reach"] == 2.0  # the reach the run will move by, shown
    wide = date("plan", SPEC, *SHORT, "--batch", 256, "--budget", "ramp", "--probe", probe_file,
                "--set", "date.ramp_reach=2", env={"COLUMNS": "300"})
    assert "ρ = 2" in wide.stdout
    none = date("plan", SPEC, *SHORT, "--batch", 256, "--budget", "ramp")
    assert none.returncode == 2 and "date probe" in none.stderr


@pytest.mark.slow
def test_a_sweep_compares_budgets_side_by_side(probe_file, tmp_path):
    """`date sweep --budgets same-epochs,ramp,ramp-planned`: each scheme once per budget, the
    report's table with epochs and steps of each, and the metric against optimizer steps."""
    out = tmp_path / "sweep"
    result = date("sweep", SPEC, *SHORT, "--batches", 64, "--schemes", "date", "--budgets",
                  "same-epochs,ramp,ramp-planned", "--probe", probe_file, "--tolerance", "5",
                  "--evals", 4, "--jobs", 2, "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    cells = {row["scheme"]: row for row in json.loads((out / "results.json").read_text())["cells"]}
    assert set(cells) == {"baseline", "date+same-epochs", "date+ramp", "date+ramp-planned"}
    same, ramped = cells["date+same-epochs"], cells["date+ramp"]
    assert same["status"] == ramped["status"] == "done"
    # bound: the same epochs, to the last step's share of them: at 64 of lenet-digits'
    # 1,437 samples a step is 0.45% of an epoch, 0.045% of 10
    assert same["epochs"] == pytest.approx(10.0, rel=0.01) and ramped["epochs"] > 10.0
    plan = json.loads((out / "cells" / "date+ramp-B64-s0" / "plan.json").read_text())
    assert plan["budget"] == "ramp" and ramped["steps"] == plan["total_iterations"]
    planned = json.loads((out / "cells" / "date+ramp-planned-B64-s0" / "plan.json").read_text())
    assert planned["ramp_mode"] == "planned" and not any(s["measured"] for s in planned["ramp"])
    assert cells["date+ramp-planned"]["steps"] == planned["total_iterations"]
    report = (out / "report.md").read_text()
    assert "| date+ramp |" in report and "| date+same-epochs |" in report
    assert "**+ramp**" in report and "| epochs | steps |" in report
    assert (out / "metric_vs_steps.png").stat().st_size > 0
    refused = date("sweep", SPEC, *SHORT, "--batches", 64, "--budgets", "hold", "-o", out)
    assert refused.returncode == 2 and "--probe" in refused.stderr
    wrong = date("sweep", SPEC, *SHORT, "--batches", 64, "--budgets", "fast", "-o", out)
    assert wrong.returncode == 2 and "unknown budget 'fast'" in wrong.stderr


# ---------------------------------------------------------------- measured by the probe's branches

def _measured(*points):
    """What a probe's branches to 4096 measured: (samples, critical batch) per checkpoint."""
    return Measurement(4096, tuple(CriticalBatch(at, batch, 0.01) for at, batch in points))


def test_the_critical_curve_is_measured_between_its_points_and_grows_with_the_noise_curve_outside():
    """Between checkpoints: the batch measured at the latest passed; before the first it falls
    and after the last it rises with the noise curve's shape; progress_at inverts it."""
    curve = CriticalCurve.of([(60000, 256), (120000, 512)], 60000, RISING)  # epochs 1 and 2
    assert (curve(1.0), curve(1.5), curve(2.0)) == (256, 256, 512)
    assert curve(0.5) == pytest.approx(128) and curve(4.0) == pytest.approx(1024)
    assert curve.measured_at(1.5) and not curve.measured_at(0.5) and not curve.measured_at(2.5)
    for batch in (64, 256, 300, 512, 2048):
        e = curve.progress_at(batch)
        assert curve(e * (1 + 1e-9)) >= batch * (1 - 1e-9) and curve(e * (1 - 1e-6)) < batch
    flat = CriticalCurve.of([(60000, 256)], 60000, None)
    assert flat(0.1) == flat(9.0) == 256 and flat.progress_at(512) == math.inf


def test_hold_and_ramp_take_the_measured_critical_batch_in_place_of_the_noise_curve():
    """With branches, hold's epochs are the cost model's on the measured critical batch; a ramp's
    rungs never start above it within the checkpoints measured; the rows say measured."""
    measured = _measured((60000, 256), (180000, 512))  # epochs 1 and 3 of 10
    curve = CriticalCurve.of([(c.at_samples, c.batch) for c in measured.critical_batch], 60000,
                             RISING)
    held = derive_plan(_spec(budget="hold"), 4096, noise_curve=RISING, measured=measured)
    plain = derive_plan(_spec(budget="hold"), 4096, noise_curve=RISING)
    assert held.critical_curve == curve and plain.critical_curve is None
    e0 = held.baseline_iterations * 128 / 60000
    assert held.forecast.factor == pytest.approx(epochs_factor(curve, 4096, 128, e0))
    assert held.total_epochs == pytest.approx(e0 * held.forecast.factor)
    # 256 measured at epoch 1 where B_noise = 500·e reads 500: a dearer batch than the curve says
    assert held.forecast.factor > plain.forecast.factor
    rows = {r.symbol: r for r in held.derivations}
    assert "B_crit" in rows and "measured" in rows["B_crit"].note
    ramped = derive_plan(_spec(), 4096, noise_curve=RISING, measured=measured)
    # the curve reaches 512·10/3 ≈ 1707 by the end: the ramp ends on the rung below it
    assert ramped.ramp[-1].batch == max(b for b in ladder(4096, 128) if b <= curve(e0)) == 1024
    for stage in ramped.ramp:
        start = stage.samples_before / 60000
        if curve.measured_at(start):
            assert stage.batch <= curve(start)
    # B_noise = 500·e reaches 512 by epoch 1.03; the measurement holds the ramp at 256 to epoch 3
    assert next(st for st in ramped.ramp if st.batch == 512).samples_before >= 3 * 60000 * 0.99


def test_a_measured_ramp_makes_no_move_of_its_own_until_past_the_branches():
    """The run's own noise scale may read far above the critical batch: up to the samples at
    which the planned ramp passes the last checkpoint branched from, the run follows the plan;
    after them its noise decides. run_samples maps the baseline's progress to the ramp's."""
    measured = _measured((60000, 256), (180000, 512))  # epochs 1 and 3
    plan = derive_plan(_spec(), 4096, noise_curve=RISING, measured=measured)
    e0 = plan.baseline_iterations * 128 / 60000
    rounding = sum(st.batch for st in plan.ramp)  # bound: ramp() rounds each rung up to a step
    assert 0 <= plan.ramp[-1].samples_after - run_samples(
        plan.critical_curve, plan.ramp, 128, 1.0, e0, 60000) < rounding

    class Noise:
        trusted, scale = True, 1e6

    follower = Follower(Noise(), plan, 1)
    until = run_samples(plan.critical_curve, plan.ramp, 128, 1.0, 3.0, 60000)
    assert follower.measured_until == until and 180000 < until < plan.ramp[-1].samples_after
    inside = next(st for st in plan.ramp if st.samples_after < until)
    assert all(follower.after(step, plan.ramp, 1.0) is None
               for step in range(inside.first_step, inside.last_step + 1))
    stage = next(st for st in plan.ramp if st.samples_before <= until < st.samples_after)
    past = stage.first_step + math.ceil((until - stage.samples_before) / stage.batch)
    assert follower.after(past, plan.ramp, 1.0) == Change(past + 1, 4096, 1e6)
    unbranched = derive_plan(_spec(), 4096, noise_curve=RISING)
    assert Follower(Noise(), unbranched, 1).after(3, unbranched.ramp, 1.0).batch == 4096


def test_a_ramp_takes_the_settings_measured_at_the_target_on_its_target_rung_only():
    settings = TargetSettings(4096, 0.25, "fixed", 0.2, 180000, True, 4)
    measured = Measurement(4096, _measured((60000, 1024), (180000, 2048)).critical_batch, settings)
    plan = derive_plan(_spec(), 4096, noise_curve=RISING, measured=measured)
    rule = derive_plan(_spec(), 4096, noise_curve=RISING,
                       measured=Measurement(4096, measured.critical_batch))
    top, below = plan.ramp[-1], plan.ramp[-2]
    assert top.batch == 4096 and top.peak_lr == pytest.approx(1e-3 * 32**0.25)
    assert top.options["alpha"] == 0.99  # the baseline's (torch's default), as measured
    assert rule.ramp[-1].options["alpha"] == pytest.approx(0.99**32)
    assert below.options == rule.ramp[-2].options and below.peak_lr == rule.ramp[-2].peak_lr


def test_a_batch_that_quadruples_mid_run_keeps_warmup_and_decay_at_the_same_tokens():
    """A measured ramp that moves 128 → 512 (4×) at step 150, after its warmup: at every step,
    the LR over its stage's peak is what the fixed-batch schedule (batch 128, the same tokens in
    all) gives at the tokens trained so far — warmup and decay stay where they were in tokens."""
    spec = _spec(warmup="constant")
    raw = spec.model_dump(mode="json", exclude_none=True)
    raw["baseline"].update(tokens_per_sample=256,
                           schedule={"name": "cosine", "final_fraction": 0.1})
    spec = parse_spec(raw)
    moved = derive_plan(spec, 4096, noise_curve=RISING, ramp_changes=(Change(150, 512, 600.0),))
    assert [st.batch for st in moved.ramp[:2]] == [128, 512] and moved.ramp[1].first_step == 150
    total = round(moved.total_epochs * 60000)  # the planned ramp's samples, which the LR spans
    assert total % 128 == 0 and total <= moved.ramp[-1].samples_after < total + 4096
    raw["baseline"].update(iterations=total // 128, epochs=None)
    raw["date"]["budget"] = "same-epochs"
    fixed = derive_plan(parse_spec(raw), 128)  # the same tokens at the baseline's batch
    assert fixed.tokens(total) == moved.tokens(total) == total * 256
    offset = moved.schedule.offset
    for step in range(1, moved.total_iterations + 1):
        before = moved.samples_through(step - offset) if step > offset else 0
        at = round(before / 128) + offset  # the fixed run's step that has trained as many
        assert before % 128 == 0
        if before >= total:  # the last stage's whole steps run past the planned samples
            assert moved.lr(step) == pytest.approx(0.1 * moved.stage_at(step).peak_lr)
            continue
        ours = moved.lr(step) / moved.stage_at(step).peak_lr
        theirs = fixed.lr(max(at, 1)) / fixed.peak_lr
        assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12), step  # bound: float64 sums
