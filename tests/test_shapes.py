"""The baseline's own LR schedule, kept: at k = 1 the plan is the baseline's scheduler, step for
step; at k > 1 the same shape over the same fraction of training (date_engine/shapes.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from date_engine import parse_spec
from date_engine.errors import SpecError
from date_engine.plan import Plan, derive_plan
from tests.bounds import float64_formula

transformers = pytest.importorskip("transformers")
from transformers import optimization as hf  # noqa: E402

B0, N, WARMUP, STEPS, LR = 16, 1600, 30, 300, 1e-3
"""A baseline of 300 steps at 16 on 1,600 samples (3 epochs), 30 warmup steps."""
SAME = float64_formula(40) * STEPS
"""Both sides compute a step's LR in at most 40 float64 operations (the progress t, the shape's
cos or pow); a shape that ends at 0 computes 1 − t, whose relative error near the end is t's
times 1/(1 − t) ≤ I − I_w < STEPS."""


def spec(schedule, warmup_steps=WARMUP, **date):
    raw = {"baseline": {"batch_size": B0, "lr": LR, "warmup_epochs": warmup_steps * B0 / N,
                        "iterations": STEPS, "dataset_size": N,
                        "optimizer": {"name": "adamw"}, "schedule": schedule}}
    if date:
        raw["date"] = date
    return parse_spec(raw)


def lrs_of(make, steps=STEPS):
    """The LR of each optimizer step 1..steps under a torch scheduler built by ``make``."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=LR)
    scheduler, out = make(opt), []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return out


def multistep(opt):  # HF's linear warmup, then torch's MultiStepLR at steps 100 and 200
    warm = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: s / WARMUP)
    steps = torch.optim.lr_scheduler.MultiStepLR(opt, [100 - WARMUP, 200 - WARMUP], 0.1)
    return torch.optim.lr_scheduler.SequentialLR(opt, [warm, steps], [WARMUP])


BASELINES = {  # the spec's schedule, and the scheduler a user's baseline ran
    "cosine": ("cosine", lambda o: hf.get_cosine_schedule_with_warmup(o, WARMUP, STEPS)),
    "cosine to 1e-4": ({"name": "cosine", "final_lr": 1e-4},
                       lambda o: hf.get_cosine_with_min_lr_schedule_with_warmup(
                           o, WARMUP, STEPS, min_lr=1e-4)),
    "linear to 0 (HF)": ({"name": "linear", "index": "torch", "final_lr": 0.0},
                         lambda o: hf.get_linear_schedule_with_warmup(o, WARMUP, STEPS)),
    "polynomial": ({"name": "polynomial", "power": 2.0, "final_lr": 1e-5},
                   lambda o: hf.get_polynomial_decay_schedule_with_warmup(
                       o, WARMUP, STEPS, lr_end=1e-5, power=2.0)),
    "constant": ("constant", lambda o: hf.get_constant_schedule_with_warmup(o, WARMUP)),
    "wsd": ({"name": "wsd", "decay_fraction": 0.2, "decay_shape": "cosine",
             "final_fraction": 0.1},
            lambda o: hf.get_wsd_schedule(o, WARMUP, 60, STEPS, decay_type="cosine",
                                          min_lr_ratio=0.1)),
    "inverse_sqrt": ("inverse_sqrt", lambda o: hf.get_inverse_sqrt_schedule(o, WARMUP)),
    "multistep": ({"name": "multistep", "milestones": [100 * B0 / N, 200 * B0 / N]}, multistep),
    "step": ({"name": "step", "every_epochs": 100 * B0 / N}, multistep),
}


@pytest.mark.parametrize("name", BASELINES)
def test_at_k_1_the_plan_is_the_baselines_own_scheduler(name):
    schedule, make = BASELINES[name]
    plan = derive_plan(spec(schedule), B0)
    assert plan.total_iterations == STEPS and plan.warmup_iterations == pytest.approx(WARMUP)
    assert plan.lrs() == pytest.approx(lrs_of(make), rel=SAME, abs=0)
    assert SAME < 1e-9  # bound: the criterion, relative 1e-9, which SAME lies within


def _after_warmup(plan: Plan, step: int) -> float:
    """t, the fraction of the post-warmup steps a step's LR is taken at (torch's count)."""
    return (step - 1 - plan.warmup_iterations) / (plan.total_iterations - plan.warmup_iterations)


def test_at_k_8_the_shape_runs_over_the_same_fraction_of_training():
    plans = [derive_plan(spec({"name": "cosine", "final_lr": 1e-4}, warmup_steps=5), b)
             for b in (B0, 8 * B0)]
    assert plans[1].scale == 8 and plans[1].total_iterations == math.ceil(STEPS / 8)
    for plan in plans:  # the same function of t at both batches, with each plan's own peak
        assert plan.warmup_iterations == pytest.approx(5)  # LEGW: k·w0 epochs, 5 steps
        for step in range(math.ceil(plan.warmup_iterations) + 2, plan.total_iterations + 1):
            t = _after_warmup(plan, step)
            shape = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))  # the end, 1e-4, is η0/10
            assert plan.lr(step) == pytest.approx(plan.peak_lr * shape, rel=SAME), step
        # bound: the last step is the shape's 1/(I − I_w) = 1/33 from its end, where it is a
        # tenth of the peak: within 0.9·(1 − cos(π/33))/2 = 0.004 of it
        assert plan.lr(plan.total_iterations) / plan.peak_lr == pytest.approx(0.1, abs=0.01)
        assert plan.lr_floor == 0.0  # the baseline's end, not DATE's floor
    assert plans[1].peak_lr == pytest.approx(8**0.5 * LR)  # the rule's peak: AdamW, no probe


def test_epoch_milestones_stay_at_their_epochs_and_stretch_with_a_longer_budget():
    milestones = {"name": "multistep", "milestones": [1.0, 2.0], "factor": 0.5}
    eight = derive_plan(spec(milestones, warmup_steps=10), 8 * B0)
    steps_per_epoch = N / (8 * B0)  # 12.5
    for step in range(1, eight.total_iterations + 1):
        epoch = (step - 1) / steps_per_epoch
        if epoch >= 10 * 8 * B0 / N:  # past LEGW's warmup (k·w0 = 0.8 epochs)
            passed = sum(epoch >= m for m in (1.0, 2.0))
            assert eight.lr(step) == pytest.approx(eight.peak_lr * 0.5**passed, rel=SAME), step
    # a plan training twice the baseline's epochs moves its milestones to 2 and 4: epoch 3.9
    # of it is the baseline's 1.95, epoch 4 its 2
    schedule = eight.schedule
    assert schedule.multiplier(3.9, 0.8, 6.0, 3.9 / 2) == 0.5
    assert schedule.multiplier(4.0, 0.8, 6.0, 4.0 / 2) == 0.25


def test_dates_own_schedule_is_unchanged_and_its_plan_json_has_no_schedule():
    default = derive_plan(spec("linear"), 8 * B0)
    assert default.schedule.is_date_default and "schedule" not in default.to_dict()
    assert default.lr(default.total_iterations) == default.lr_floor == 1e-6
    cosine = derive_plan(spec("cosine"), 8 * B0)
    again = Plan.from_dict(json.loads(json.dumps(cosine.to_dict())))
    assert again == cosine and again.lrs() == cosine.lrs()


def test_hf_args_for_a_cosine_baseline_run_hfs_own_scheduler_at_the_plans_lr():
    """`date plan --emit hf-args` for a cosine baseline, parsed by HfArgumentParser and run
    through HF's own scheduler, gives plan.lr(s) at every step."""
    from date_engine import plan_for
    from date_engine.integrations import hf_flags

    run = plan_for(spec({"name": "cosine", "final_lr": 1e-4}), batch=8 * B0)
    argv = []
    for flag in hf_flags(run):
        key, value = flag.split(" ", 1)
        argv += [key, value.strip("'")]
    parser = transformers.HfArgumentParser(transformers.TrainingArguments)
    (args,) = parser.parse_args_into_dataclasses(["--output_dir", "unused", *argv])
    assert args.lr_scheduler_type == "cosine_with_min_lr"
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=args.learning_rate)
    scheduler = transformers.get_scheduler(
        args.lr_scheduler_type, opt, num_warmup_steps=args.warmup_steps,
        num_training_steps=args.max_steps, scheduler_specific_kwargs=args.lr_scheduler_kwargs)
    for step in range(1, run.plan.total_iterations + 1):
        assert opt.param_groups[0]["lr"] == pytest.approx(run.plan.lr(step), rel=SAME), step
        opt.step()
        scheduler.step()


@pytest.mark.parametrize("schedule, words", [
    ({"name": "cosine", "power": 2}, "'power' is not an option of the cosine schedule"),
    ({"name": "cosine", "final_lr": 1e-4, "final_fraction": 0.1}, "not both"),
    ({"name": "multistep"}, "needs milestones"),
    ({"name": "multistep", "milestones": [3, 1]}, "increasing epochs"),
    ({"name": "step"}, "needs every_epochs"),
    ({"name": "cosh"}, "baseline.schedule.name"),
])
def test_a_schedule_that_cannot_be_is_one_sentence(schedule, words):
    with pytest.raises(SpecError, match=words):
        spec(schedule)
