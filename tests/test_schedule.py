"""The LR curve pinned at its landmarks: step 1, the last warmup step, the first decay step, the
last step and the floor, for every scaling, warmup rule and warmup shape.

All rows use the paper's LeNet example scaled to B = 8192 (n = 60000, I = 220). Expected values
are written the way docs/algorithm.md §2 states them — in epochs, e = i·B/n — not the way the code
computes them (i / I_w), so the two routes check each other.
"""

from __future__ import annotations

import itertools
import json
import math
import pickle

import pytest

from date_engine import PlanError
from date_engine.plan import derive_plan
from tests.bounds import float64_formula
from tests.conftest import lenet_spec

B, N, I = 8192, 60000, 220  # noqa: E741 - the paper's symbols
ETA = {"sqrt": 1.25e-3 * math.sqrt(8), "linear": 1.25e-3 * 8, "none": 1.25e-3}
# warmup rule -> (w in epochs, last warmup step, first decay step); I_w = w·n/B
WARMUP = {"legw": (16.0, 117, 118), "constant": (2.0, 14, 15)}
POWER = {"linear": 1, "quadratic": 2}


def epoch(i):
    return i * B / N


# Literal values for the default scheme (sqrt + LEGW + linear warmup), to 12 digits.
PINNED = [
    (1, 3.01698893306e-05),     # η·(e/w), e = 8192/60000
    (117, 0.00352987705168),    # last warmup step, e = 15.97 < 16
    (118, 0.0035075935164),     # first decay step: η·(220 − 118)/(220 − 117.1875)
    (220, 1e-6),                # last step: the decay reaches 0, the floor holds
]


@pytest.mark.parametrize("step, expected", PINNED)
def test_default_scheme_pinned(step, expected):
    # bound: the literals' 12 significant digits: 5e-12 relative; 1e-10 leaves the plan's own
    # float64 evaluation (float64_formula(20) = 4.4e-15) far below it
    assert derive_plan(lenet_spec(), B).lr(step) == pytest.approx(expected, rel=1e-10)


CASES = list(itertools.product(ETA, WARMUP, POWER))


@pytest.mark.parametrize("scaling, warmup, shape", CASES)
def test_landmarks(scaling, warmup, shape):
    plan = derive_plan(lenet_spec(scaling=scaling, warmup=warmup, warmup_shape=shape), B)
    eta, p = ETA[scaling], POWER[shape]
    w, last_warm, first_decay = WARMUP[warmup]
    i_w = w * N / B

    assert plan.peak_lr == pytest.approx(eta, rel=float64_formula(4))
    assert plan.warmup_epochs == w
    assert plan.warmup_iterations == pytest.approx(i_w, rel=float64_formula(4))
    assert epoch(last_warm) < w <= epoch(first_decay)
    within = float64_formula(20)  # a schedule's value: at most 20 float64 operations either way
    assert plan.lr(1) == pytest.approx(eta * (epoch(1) / w) ** p, rel=within)
    assert plan.lr(last_warm) == pytest.approx(eta * (epoch(last_warm) / w) ** p, rel=within)
    assert plan.lr(first_decay) == pytest.approx(eta * (I - first_decay) / (I - i_w), rel=within)
    assert plan.lr(I) == 1e-6
    names = [ph.name for ph in plan.phases]
    assert names == ["warmup", "decay", "floor"]
    assert plan.phases[0].last_step == last_warm and plan.phases[1].first_step == first_decay


@pytest.mark.parametrize("scaling, warmup", list(itertools.product(ETA, WARMUP)))
def test_floor_takes_over_from_the_decay(scaling, warmup):
    floor = 1e-4
    plan = derive_plan(lenet_spec(scaling=scaling, warmup=warmup, lr_floor=floor), B)
    eta, (w, _, _) = ETA[scaling], WARMUP[warmup]
    i_w = w * N / B
    # first step whose decayed value η·(I − i)/(I − I_w) is at or below the floor
    first_floor = math.ceil(I - floor * (I - i_w) / eta)
    assert plan.lr(first_floor - 1) == pytest.approx(eta * (I - first_floor + 1) / (I - i_w))
    assert plan.lr(first_floor - 1) > floor
    assert all(plan.lr(i) == floor for i in range(first_floor, I + 1))
    assert plan.phases[-1].name == "floor" and plan.phases[-1].first_step == first_floor


def test_floor_example_by_hand():
    plan = derive_plan(lenet_spec(lr_floor=1e-4), B)
    # η·3/102.8125 > floor; bound: the literal's 12 significant digits (5e-12 relative)
    assert plan.lr(217) == pytest.approx(0.000103164515188, rel=1e-10)
    assert plan.lr(218) == 1e-4  # η·2/102.8125 = 6.88e-5 is below it
    assert plan.phases[-1].first_step == 218


def test_schedule_is_monotone_up_then_down():
    lrs = derive_plan(lenet_spec(), B).lrs()
    peak = lrs.index(max(lrs))
    assert all(a < b for a, b in zip(lrs[:peak], lrs[1 : peak + 1]))
    assert all(a >= b for a, b in zip(lrs[peak:], lrs[peak + 1 :]))
    assert peak + 1 == 117  # the last warmup step, η·117/117.1875, is the largest LR used


def test_no_warmup_starts_decaying_at_step_one():
    spec = lenet_spec()
    spec = spec.model_copy(
        update={"baseline": spec.baseline.model_copy(update={"warmup_epochs": 0.0})}
    )
    plan = derive_plan(spec, B)
    assert plan.warmup_iterations == 0
    assert plan.lr(1) == pytest.approx(plan.peak_lr * (I - 1) / I)
    assert [ph.name for ph in plan.phases] == ["decay", "floor"]


def test_steps_past_the_end_stay_at_the_floor_and_step_zero_is_refused():
    plan = derive_plan(lenet_spec(), B)
    assert plan.lr(I + 50) == 1e-6
    with pytest.raises(ValueError):
        plan.lr(0)


def test_plan_is_frozen_and_picklable():
    plan = derive_plan(lenet_spec(), B)
    clone = pickle.loads(pickle.dumps(plan))
    assert clone == plan and clone.lr(118) == plan.lr(118)
    lr = pickle.loads(pickle.dumps(plan.lr))  # the bound schedule itself travels to workers
    assert lr(1) == plan.lr(1)
    with pytest.raises(AttributeError):
        plan.peak_lr = 1.0  # type: ignore[misc]


def test_phases_cover_every_step_once():
    plan = derive_plan(lenet_spec(), B)
    steps = [i for ph in plan.phases for i in range(ph.first_step, ph.last_step + 1)]
    assert steps == list(range(1, I + 1))
    assert plan.phases[0].first_epoch == 0 and plan.phases[-1].last_epoch == pytest.approx(
        I * B / N
    )


def test_scaling_down_is_allowed():
    plan = derive_plan(lenet_spec(), 256)
    assert plan.scale == 0.25 and plan.peak_lr == pytest.approx(1.25e-3 * 0.5)
    assert plan.total_iterations == 1755 * 4


def test_epochs_are_taken_as_written():
    # 0.1 epochs of 60000 samples at batch 100 is 60 steps, not ceil(60.000000000000007) = 61
    spec = lenet_spec()
    base = spec.baseline.model_copy(
        update={"iterations": None, "epochs": 0.1, "batch_size": 100, "warmup_epochs": 0.0}
    )
    plan = derive_plan(spec.model_copy(update={"baseline": base}), 100)
    assert plan.baseline_iterations == 60 == plan.total_iterations


def test_warmup_past_the_end_is_refused_with_the_largest_batch_that_fits():
    plan = derive_plan(lenet_spec(), 8192)
    assert plan.max_legw_batch == 15335  # 1024 · 29.952 / 2 = 15335.4
    derive_plan(lenet_spec(), 15335)
    with pytest.raises(PlanError, match="LEGW fits up to batch 15335"):
        derive_plan(lenet_spec(), 15336)


def test_the_schedulers_state_carries_its_plan_and_refuses_another():
    """The state Lightning and accelerate checkpoint: loaded under another plan it is refused
    naming both; with replan=True it continues at the new plan's step of as many samples; an
    older state without a plan loads as before; the same plan split otherwise loads as saved."""
    import torch

    from date_engine import baseline, plan_for, scheduler_for
    from date_engine.errors import DateError

    base = baseline(batch_size=16, lr=2e-3, warmup_epochs=0.25, epochs=4, dataset_size=1024,
                    optimizer="adamw")
    old, new = plan_for(base, 128), plan_for(base, 64)
    param = torch.nn.Parameter(torch.zeros(2))

    def scheduler(run, **kwargs):
        optimizer = torch.optim.AdamW([param], lr=run.plan.peak_lr)
        return scheduler_for(optimizer, run, **kwargs), optimizer

    saved, _ = scheduler(old)
    for _ in range(20):
        saved.step()
    state = saved.state_dict()
    assert state["plan"] == old.plan.summary() and state["samples"] == 20 * 128
    with pytest.raises(DateError, match=r"another plan \(batch 128, 32 steps.*\(batch 64, 64 "
                                        r"steps.*replan=True"):
        scheduler(new)[0].load_state_dict(state)
    replanned, optimizer = scheduler(new, replan=True)
    replanned.load_state_dict(state)
    assert replanned.last_epoch == 40 and optimizer.param_groups[0]["lr"] == new.plan.lr(41)
    same, optimizer = scheduler(plan_for(base, 128, micro_batch=32))
    same.load_state_dict(state)
    assert optimizer.param_groups[0]["lr"] == old.plan.lr(21)
    unmarked, optimizer = scheduler(new)
    unmarked.load_state_dict({"last_epoch": 5, "_step_count": 6})
    assert optimizer.param_groups[0]["lr"] == new.plan.lr(6)


def test_every_shipped_plan_keeps_its_lr_at_every_step_to_the_bit():
    """lr(1..I) of 315 plans (every shipped recipe × rule × warmup × shape × batch, every shape
    of baseline.schedule under both indexes, the hold and ramp budgets) against the digests
    recorded before the schedule code was last reshaped (tests/lr_snapshot.py)."""
    from tests.lr_snapshot import DIGESTS, digests

    recorded, now = json.loads(DIGESTS.read_text()), digests()
    assert sorted(now) == sorted(recorded), "the set of plans changed: see tests/lr_snapshot.py"
    moved = [name for name in recorded if now[name] != recorded[name]]
    assert not moved, f"{len(moved)} plans' LRs moved, e.g. {moved[:3]}"
