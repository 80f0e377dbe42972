"""Branch runs (branches.py, train/branches.py), the spike definition (spikes.py), and the plan
that takes what the branches measured."""

from __future__ import annotations

import json
import math
import random

import pytest

from date_engine.branches import (
    MIN_BRANCH_STEPS,
    Branch,
    Measurement,
    branch_cost,
    choose_settings,
    critical_batches,
    exponents_below,
    judge,
    ladder,
    setting_count,
)
from date_engine.errors import DateError
from date_engine.plan import Plan, derive_plan
from date_engine.probe import Probe
from date_engine.spec import parse_spec
from date_engine.spikes import PERSIST, SpikeWatch
from tests.runs import SHORT, SPEC, date


def _branch(batch, loss, role="ladder", at=1000, start=None, why="", metric=None, p=None,
            moment="scaled", half=None, half_metric=None):
    return Branch(at, batch, 1e-3, 4096, 4096 // batch, loss, metric, stable=False,
                  keeps_up=False, role=role, lr_exponent=p, second_moment=moment, why=why,
                  start_loss=start, half_loss=half, half_metric=half_metric)


# ------------------------------------------------------------------ the ladder and its cost


def test_the_ladder_halves_the_target_down_to_the_baseline():
    assert ladder(16, 512) == (16, 32, 64, 128, 256, 512)
    assert ladder(12, 768) == (12, 24, 48, 96, 192, 384, 768)
    assert ladder(128, 1000) == (128, 250, 500, 1000)  # halved while whole and above B0
    with pytest.raises(DateError, match="above the baseline's 16"):
        ladder(16, 16)


def test_the_exponents_tried_go_down_a_quarter_at_a_time_to_the_square_root():
    assert exponents_below(0.75) == (0.75, 0.5)
    assert exponents_below(1.0) == (1.0, 0.75, 0.5)
    assert exponents_below(0.5) == (0.5, 0.25)
    assert setting_count(0.75, adaptive=True) == 4 and setting_count(1.0, adaptive=False) == 3


def test_the_cost_stays_within_the_budget_with_fewer_points_said_in_one_line():
    cost = branch_cost(16, 512, 3, 4, baseline_samples=86224, target_samples=86224)
    branches = 1 * (6 + 1) + 4
    assert cost.points == 1 and cost.total == branches * cost.samples <= cost.budget == 86224
    assert cost.samples >= MIN_BRANCH_STEPS * 512 and cost.samples % 512 == 0
    assert "Branching from 1 checkpoint, not 3" in cost.note
    assert "0.98× one baseline run" in cost.line()
    # room for all three: no note, and each branch as long as the budget allows
    roomy = branch_cost(16, 512, 3, 4, 86224, 86224, budget=10**6)
    assert roomy.points == 3 and not roomy.note and roomy.total <= 10**6
    assert roomy.total + (3 * 7 + 4) * 512 > 10**6  # one step more each would not fit
    # a tenth of a long target run is the budget where it is the larger
    assert branch_cost(16, 512, 1, 4, 86224, 2 * 10**6).budget == 200000


def test_a_target_the_budget_cannot_branch_to_is_refused_with_the_flag_that_allows_it():
    with pytest.raises(DateError) as refused:
        branch_cost(12, 768, 3, 4, baseline_samples=24000, target_samples=24000)
    said = str(refused.value)
    need = (8 + 4) * MIN_BRANCH_STEPS * 768
    assert f"need {need:,} samples" in said and f"--branch-samples {need}" in said


# ------------------------------------------------------------------ reading the branches


def test_keeping_up_is_needing_at_most_twice_the_baseline_branches_samples():
    """The bar is what the baseline's branches reached with half the samples (mean 1.1, τ 0.02
    of their two data orders); stability is read against where each branch began."""
    raw = [_branch(16, 1.00, "baseline", start=1.5, half=1.09),
           _branch(16, 1.02, "baseline", start=1.5, half=1.11),
           _branch(32, 1.115, start=1.4),   # within τ of their halfway 1.1: keeps up
           _branch(64, 1.16, start=1.3),    # behind, but lower than it began: slow, stable
           _branch(128, 1.35, start=1.3),   # ended above where it began: unstable
           _branch(256, None, start=1.3)]   # non-finite
    judged = {b.batch: b for b in judge(raw, higher_is_better=True) if b.role != "baseline"}
    assert judged[32].keeps_up and judged[32].stable
    assert not judged[64].keeps_up and judged[64].stable
    assert not judged[128].stable and "above the 1.3 it began at" in judged[128].why
    assert not judged[256].stable and "non-finite" in judged[256].why
    (critical,) = critical_batches(judge(raw, True))
    assert critical.batch == 32 and critical.tolerance == pytest.approx(0.02)
    # a metric behind the baseline's halfway one by more than its spread does not keep up
    with_metric = [_branch(16, 1.0, "baseline", half=1.0, half_metric=90.0),
                   _branch(16, 1.0, "baseline", half=1.0, half_metric=90.4),
                   _branch(32, 1.0, metric=89.0)]
    assert not judge(with_metric, higher_is_better=True)[2].keeps_up
    assert judge(with_metric, higher_is_better=False)[2].keeps_up  # a loss-like metric: lower


def test_the_critical_batch_stops_at_the_first_batch_that_falls_behind():
    raw = [_branch(16, 1.0, "baseline", half=1.1), _branch(16, 1.0, "baseline", half=1.1),
           _branch(32, 1.2), _branch(64, 1.0)]  # 64 keeping up does not lift it past 32
    assert critical_batches(judge(raw, True))[0].batch == 16


def test_the_settings_taken_are_the_stable_ones_with_the_lowest_loss():
    base = [_branch(16, 1.0, "baseline"), _branch(16, 1.0, "baseline")]
    tried = [_branch(512, 0.9, "setting", p=0.75, why="step 3 of 12: the loss rose"),
             _branch(512, 1.1, "setting", p=0.75, moment="fixed"),
             _branch(512, 1.05, "setting", p=0.5),
             _branch(512, 1.2, "setting", p=0.5, moment="fixed")]
    best = choose_settings(judge(base + tried, True), 512)
    assert (best.lr_exponent, best.second_moment, best.stable, best.tried) == \
        (0.5, "scaled", True, 4)
    rising = [_branch(512, loss, "setting", p=p, moment=m, start=0.5) for p, m, loss in (
        (0.75, "scaled", 1.24), (0.75, "fixed", 2.11), (0.5, "scaled", 0.71), (0.5, "fixed", 1.82))]
    lowest = choose_settings(judge(base + rising, True), 512)  # none stable: the lowest loss
    assert (lowest.lr_exponent, lowest.second_moment, lowest.stable) == (0.5, "scaled", False)
    none = [_branch(512, None, "setting", p=p, moment=m) for p in (0.75, 0.5)
            for m in ("scaled", "fixed")]
    cautious = choose_settings(judge(base + none, True), 512)  # all non-finite: the lowest LR
    assert (cautious.lr_exponent, cautious.second_moment, cautious.stable) == (0.5, "fixed", False)


# ------------------------------------------------------------------ spikes


def test_a_noisy_loss_is_no_spike_and_a_divergence_is_one_within_a_few_steps():
    rng = random.Random(0)
    watch = SpikeWatch()
    for step in range(2000):  # a small batch's loss: falling, noisy, with rare hard batches
        loss = 2.0 * math.exp(-step / 500) + 0.3 + abs(rng.gauss(0, 0.15))
        loss += 1.5 if rng.random() < 0.01 else 0.0
        assert watch.observe(loss, 1.0 + rng.random()) is None, step
    state = watch.state_dict()
    fired = [watch.observe(11.8, 30.0) for _ in range(PERSIST)]
    assert fired[:-1] == [None] * (PERSIST - 1) and "the loss rose" in fired[-1]
    again = SpikeWatch()
    again.load_state_dict(state)  # a resumed watch goes on as the one it was saved from
    assert [again.observe(11.8, 30.0) for _ in range(PERSIST)] == fired
    assert SpikeWatch().observe(float("nan")) == "a non-finite loss or gradient"
    trained = SpikeWatch()  # a run trained far down: a few hard batches are no spike
    for step in range(3000):
        trained.observe(2.3 * math.exp(-step / 300) + 0.008)
    assert all(trained.observe(0.19) is None for _ in range(10))
    assert "the loss rose" in [trained.observe(2.3) for _ in range(PERSIST)][-1]
    grad = SpikeWatch()
    for _ in range(100):
        grad.observe(1.0, 0.2)
    assert "gradient norm" in [grad.observe(1.0, 50.0) for _ in range(PERSIST)][-1]


# ------------------------------------------------------------------ the plan takes them


def _spec(**date_section):
    return parse_spec({
        "recipe": "lenet-digits",
        "baseline": {"batch_size": 16, "lr": 1e-3, "warmup_epochs": 1, "epochs": 60,
                     "dataset_size": 1437, "optimizer": {"name": "adam"}},
        "date": date_section})


def _measured(p=0.25, moment="fixed", stable=True, batch=512):
    data = {"branched_to": batch,
            "critical_batch": [{"at_samples": 6912, "batch": 64, "tolerance": 0.01}],
            "settings": {"batch": batch, "lr_exponent": p, "second_moment": moment,
                         "loss": 0.2, "at_samples": 6912, "stable": stable, "tried": 4}}
    return Measurement.from_dict(data)


def test_the_plan_takes_the_measured_lr_exponent_and_second_moment_at_that_batch_only():
    spec, measured = _spec(), _measured()
    plan = derive_plan(spec, 512, measured=measured)
    assert plan.peak_lr == pytest.approx(1e-3 * 32**0.25) and plan.lr_exponent == 0.25
    assert plan.optimizer.options["betas"][1] == 0.999  # the baseline's, as measured
    assert "measured: the stable setting with the lowest loss of the 4" in plan.lr_note
    assert any(d.note == "measured: branches at this batch" and d.symbol == "β2"
               for d in plan.derivations)
    told = derive_plan(_spec(second_moment="scaled"), 512, measured=measured)  # said: kept
    assert told.optimizer.options["betas"][1] == pytest.approx(0.999**32)
    assert told.peak_lr == plan.peak_lr
    other = derive_plan(spec, 256, measured=measured)  # not branched there: the rule's
    assert other.optimizer.options["betas"][1] == pytest.approx(0.999**16)
    assert other.peak_lr == derive_plan(spec, 256).peak_lr
    # the paper's rule and a named scaling keep their own
    assert derive_plan(_spec(rule="paper"), 512, measured=measured).peak_lr == \
        pytest.approx(1e-3 * 32**0.5)
    assert derive_plan(_spec(scaling="linear"), 512, measured=measured).peak_lr == \
        pytest.approx(32e-3)
    none_stable = derive_plan(spec, 512, measured=_measured(stable=False))
    assert "no setting of the 4 branched at batch 512 was stable" in none_stable.lr_note
    assert "reached the lowest loss" in none_stable.lr_note
    # a plan carries the measurement through JSON; one without has no key for it
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert "measured" not in derive_plan(spec, 512).to_dict()


def test_a_probe_of_the_format_before_branches_still_reads(tmp_path):
    from date_engine.probe import NoisePoint

    data = Probe(baseline={"batch_size": 16}, baseline_epochs=10.0, steps=90,
                 baseline_steps=900, epochs=1.0, micro_batch=4, world_size=1,
                 accumulation_steps=4, wall_seconds=9.0,
                 points=(NoisePoint(0.25, 20.0, 1.0, 20.0, 2.0),
                         NoisePoint(0.75, 40.0, 1.0, 40.0, 1.0))).to_dict()
    for key in ("target_batch", "branches", "critical_batch", "settings", "branch_cost"):
        del data[key]
    data["format"] = 2
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(data))
    probe = Probe.read(path)
    assert probe.branches == () and probe.measurement is None


# ------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_date_probe_branches_writes_them_and_date_plan_reads_what_they_measured(tmp_path):
    folder = tmp_path / "probe"
    args = ("probe", SPEC, *SHORT, "--share", "0.2", "--points", "4", "--batch", 64,
            "--branch-points", 2, "-o", folder)
    result = date(*args)
    assert result.returncode == 0, result.stderr
    assert "Branches:" in result.stderr and "× one baseline run" in result.stderr
    probe = json.loads((folder / "probe.json").read_text())
    assert probe["format"] == 3 and probe["target_batch"] == 64
    # 2 checkpoints × (16 twice, 32, 64) + 64 at its peak: 2 exponents × 2 second moments
    assert len(probe["branches"]) == 2 * 4 + 4
    assert [c["at_samples"] for c in probe["critical_batch"]] == \
        sorted({b["at_samples"] for b in probe["branches"]})
    assert all(b["samples"] == probe["branch_cost"]["samples"] for b in probe["branches"])
    assert probe["settings"]["batch"] == 64 and probe["settings"]["tried"] == 4
    assert not list(folder.glob("branches/*/run/checkpoints/*.pt"))  # read, then removed
    plan = date("plan", SPEC, *SHORT, "--batch", 64, "--probe", folder / "probe.json")
    assert plan.returncode == 0, plan.stderr
    assert "Measured by the probe's branches (to batch 64)" in plan.stdout
    assert "η and the second moment: measured at this batch" in plan.stdout
    # an interrupted probe trains only the branches it has not: one lost, one trained again
    kept = {p: p.stat().st_mtime_ns for p in folder.glob("branches/*/branch.json")}
    lost = sorted(kept)[0]
    lost.unlink()
    (folder / "probe.json").unlink()
    again = date(*args)
    assert again.returncode == 0, again.stderr
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items() if p != lost)
    assert json.loads((folder / "probe.json").read_text())["branches"] == probe["branches"]
