"""From spec to optimizer and schedule: the objects the trainer and users' loops get."""

from __future__ import annotations

import io

import pytest
import torch

from date_engine import parse_spec
from date_engine.catalog import CATALOG, LAYER_RATIO_DEFAULTS
from date_engine.optim import DATE, LARS
from date_engine.optim.build import build_base_optimizer, build_optimizer
from date_engine.plan import derive_plan
from date_engine.schedule import scheduler_for
from date_engine.spec import OptimizerSpec
from tests.bounds import close_within, float64_formula
from tests.conftest import LENET, lenet_spec


@pytest.mark.parametrize(
    "spec, cls, expected",
    [
        (OptimizerSpec(name="sgd"), torch.optim.SGD, {"momentum": 0, "nesterov": False}),
        (
            OptimizerSpec(name="momentum", weight_decay=5e-5),
            torch.optim.SGD,
            {"momentum": 0.9, "weight_decay": 5e-5},
        ),
        (
            OptimizerSpec(name="nesterov", momentum=0.8),
            torch.optim.SGD,
            {"momentum": 0.8, "nesterov": True},
        ),
        (OptimizerSpec(name="adagrad"), torch.optim.Adagrad, {"eps": 1e-10}),
        (
            OptimizerSpec(name="rmsprop", alpha=0.9),
            torch.optim.RMSprop,
            {"alpha": 0.9, "eps": 1e-8},
        ),
        (OptimizerSpec(name="adam", betas=(0.8, 0.9)), torch.optim.Adam, {"betas": (0.8, 0.9)}),
        (OptimizerSpec(name="adamw"), torch.optim.AdamW, {"weight_decay": 1e-2}),
    ],
    ids=lambda v: getattr(v, "name", None) if isinstance(v, OptimizerSpec) else "",
)
def test_base_optimizer_from_spec(spec, cls, expected):
    opt = build_base_optimizer(
        [torch.nn.Parameter(torch.zeros(2, 2))], spec.name, spec.options(), lr=0.5
    )
    assert type(opt) is cls
    group = opt.param_groups[0]
    assert group["lr"] == 0.5
    for key, value in expected.items():
        assert group[key] == value, key


@pytest.mark.parametrize("name", ["sgd", "momentum", "adagrad", "rmsprop", "adam", "adamw"])
def test_bases_take_torchs_fastest_step(name):
    """fused=True where torch has a fused kernel (else foreach=True), giving what torch's default
    step gives; a flag the caller passes is kept as given."""
    def trained(flags):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
        options = {**CATALOG[name].defaults, **flags}
        opt = build_base_optimizer(model.parameters(), name, options, lr=1e-2)
        for _ in range(5):
            opt.zero_grad()
            model(torch.randn(8, 6)).square().mean().backward()
            opt.step()
        return opt, torch.cat([p.detach().flatten() for p in model.parameters()])

    fast, w = trained({})
    group = fast.param_groups[0]
    has_fused = name != "rmsprop"
    assert bool(group.get("fused")) is has_fused and bool(group["foreach"]) is not has_fused
    loop, w_loop = trained({"foreach": False})
    assert not loop.param_groups[0].get("fused") and loop.param_groups[0]["foreach"] is False
    # the two paths order and fuse the same update of the same gradients differently: at most
    # 18 roundings a step (the update's 16 and two stores), 5 steps
    torch.testing.assert_close(w, w_loop, **close_within(torch.float32, 18 * 5, w.abs().max()))


def test_date_over_the_base_with_the_plans_rule():
    model = torch.nn.Linear(3, 2)
    spec = lenet_spec(layer_ratio={"mode": "static", "trust_coefficient": 0.5, "upper": 2.0})
    plan = derive_plan(spec, 8192)
    assert plan.optimizer.layer_ratio == {
        "mode": "static",
        "trust_coefficient": 0.5,
        "lower": 0.0,
        "upper": 2.0,
    }
    opt = build_optimizer(model.named_parameters(), plan.optimizer, lr=0.1)
    assert isinstance(opt, DATE) and isinstance(opt.base, torch.optim.RMSprop)
    assert (opt.rule.mode, opt.rule.trust_coefficient, opt.rule.lower, opt.rule.upper) == (
        "static",
        0.5,
        0.0,
        2.0,
    )
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
    default = build_optimizer(model.parameters(), derive_plan(lenet_spec(), 8192).optimizer, lr=0.1)
    assert default.rule.mode == "dynamic"
    assert default.rule.gamma == LAYER_RATIO_DEFAULTS["dynamic"]["gamma"] == 8.0


def test_layerwise_optimizers_are_built_without_date():
    spec = parse_spec(
        {
            **LENET,
            "baseline": {**LENET["baseline"], "optimizer": {"name": "lars"}},
            "date": {"layer_ratio": {"mode": "off"}},
        }
    )
    opt = build_optimizer(
        torch.nn.Linear(3, 2).named_parameters(), derive_plan(spec, 8192).optimizer, lr=0.1
    )
    assert isinstance(opt, LARS) and [g["layer_ratio"] for g in opt.param_groups] == [True, False]


def test_scheduler_gives_every_optimizer_step_the_plan_lr():
    plan = derive_plan(lenet_spec(), 8192)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=plan.peak_lr)
    sched = scheduler_for(opt, plan)
    used = []
    for _ in range(plan.total_iterations):
        used.append(opt.param_groups[0]["lr"])  # the LR this optimizer step runs at
        opt.step()
        sched.step()
    # LambdaLR: η0 times plan.lr(s)/η0, two roundings on plan.lr(s)
    assert used == pytest.approx(plan.lrs(), rel=float64_formula(2))


def test_scheduler_state_round_trips_through_torch_save():
    plan = derive_plan(lenet_spec(), 8192)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=plan.peak_lr)
    sched = scheduler_for(opt, plan)
    for _ in range(50):
        opt.step()
        sched.step()
    buffer = io.BytesIO()
    torch.save(sched.state_dict(), buffer)
    buffer.seek(0)

    opt2 = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=plan.peak_lr)
    sched2 = scheduler_for(opt2, plan)
    sched2.load_state_dict(torch.load(buffer, weights_only=False))
    opt2.step()
    sched2.step()
    assert opt2.param_groups[0]["lr"] == pytest.approx(plan.lr(52))
