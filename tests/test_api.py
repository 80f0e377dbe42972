"""The public API: names re-exported from `date_engine`, torch loaded only when a torch name is
used."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import date_engine
from date_engine import DateError, optimizer_for, plan_for, scheduler_for
from tests.conftest import ROOT


def test_public_names_resolve():
    for name in date_engine.__all__:
        assert getattr(date_engine, name) is not None, name
    from date_engine import DATE, LAMB, LARS  # noqa: F401


def test_import_does_not_load_torch_until_a_torch_name_is_used():
    code = (
        "import sys, date_engine\n"
        "before = 'torch' in sys.modules\n"
        "date_engine.DATE\n"
        "print(before, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.split() == ["False", "True"]


def test_wrong_arguments_to_the_api_get_a_sentence():
    """What an outside check passed to the Python API and got tracebacks deep inside for
    (AttributeError, KeyError 'momentum'): each is refused at the door, saying what to pass."""
    import torch

    from date_engine import DATE, load_spec
    from date_engine.optim.build import build_optimizer
    from date_engine.plan import derive_plan
    from date_engine.planning import plan_for

    with pytest.raises(TypeError, match="derive_plan: spec must be a validated Spec.*got a dict"):
        derive_plan({"baseline": {}}, 8)
    with pytest.raises(DateError, match="plan_for: spec must be a validated Spec"):
        plan_for({"baseline": {}}, 8)
    with pytest.raises(TypeError, match="load_spec takes the path.*got NoneType"):
        load_spec(None)
    model = torch.nn.Linear(3, 3)
    with pytest.raises(TypeError, match="plan.optimizer.*got NoneType"):
        build_optimizer(model.parameters(), None, 0.1)
    with pytest.raises(ValueError, match="built without names.*named_parameters"):
        DATE(torch.optim.SGD(model.parameters(), lr=0.1), exclude=lambda name, p: "bias" in name)
    DATE(torch.optim.SGD(model.named_parameters(), lr=0.1), exclude=lambda name, p: "b" in name)

    adam = DATE(torch.optim.Adam(model.parameters(), lr=0.1))
    model(torch.ones(1, 3)).sum().backward()
    adam.step()
    sgd = DATE(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    with pytest.raises(ValueError, match="DATE over Adam's; this DATE wraps SGD"):
        sgd.load_state_dict(adam.state_dict())
    plain = adam.base.state_dict()  # a plain base's state dict: no class to compare
    with pytest.raises(ValueError, match="groups lack .*momentum"):
        sgd.load_state_dict(plain)
    sgd.step()  # left as it was: it still steps
    assert sgd.param_groups[0]["momentum"] == 0.9


@pytest.mark.parametrize("call, says", [
    (lambda run: plan_for("lenet-digits", 512, overrides=[5]),
     "overrides must be a list of key=value strings .*, got 5."),
    (lambda run: plan_for("lenet-digits", 512, overrides="baseline.lr"),
     "expected key=value"),
    (lambda run: plan_for(5, 512), "plan_for: spec must be a validated Spec .*, got 5."),
    (lambda run: plan_for("lenet-digits", 512, recipe=3),
     "plan_for: recipe must be a Recipe or a recipe's name, got 3."),
    (lambda run: plan_for("lenet-digits", "512"), "batch must be a positive whole number"),
    (lambda run: optimizer_for(None, run), "optimizer_for: model must be a list of parameters"),
    (lambda run: optimizer_for(torch.nn.ReLU(), run), "optimizer_for: model has no parameters"),
    (lambda run: optimizer_for(torch.nn.Linear(2, 2), run, date="yes"),
     "optimizer_for: date must be True .*, got 'yes'."),
    (lambda run: scheduler_for(optimizer_for(torch.nn.Linear(2, 2), run), None),
     "scheduler_for: run must be a RunPlan"),
    (lambda run: scheduler_for(None, run), "scheduler_for: optimizer must be the torch optimizer"),
    (lambda run: plan_for("lenet-digits", 513, devices=2),
     "use a batch of 512 or 514, or devices 1 or 3."),
    (lambda run: plan_for("lenet-digits", 512, devices=1, micro_batch=1024),
     "use micro_batch=512 or less."),
    (lambda run: plan_for("lenet-digits", 512, budget="hold"),
     "pass probe='<its probe.json>', or use budget='same-epochs'."),
])
def test_each_public_function_refuses_a_wrong_argument_in_one_sentence_naming_it(call, says):
    """A wrong type or value is a DateError naming the Python parameter (not a CLI flag), never
    an AttributeError from deep inside; a wrong type is a TypeError too."""
    run = plan_for("lenet-digits", 512)
    with pytest.raises(DateError, match=says) as refused:
        call(run)
    assert "--" not in str(refused.value) and len(str(refused.value).splitlines()) == 1


def test_a_recipe_may_be_named_and_the_command_line_names_its_flags():
    from typer.testing import CliRunner

    from date_engine.cli import app

    named = plan_for("lenet-digits", 512, recipe="lenet-digits")
    assert named.plan == plan_for("lenet-digits", 512).plan
    out = CliRunner().invoke(app, ["plan", "lenet-digits", "--batch", "513", "--nproc", "2"])
    assert out.exit_code == 2 and "or --nproc 1 or 3." in out.output


def test_the_command_line_and_the_trainer_stay_within_their_bounds():
    """cli.py parses, calls and prints (≤ 450 lines); the bundled Trainer ≤ 350 lines with no
    method over 40: logic that grows there belongs in the library."""
    import ast

    assert len((ROOT / "date_engine" / "cli.py").read_text().splitlines()) <= 450
    tree = ast.parse((ROOT / "date_engine" / "train" / "trainer.py").read_text())
    trainer = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    assert trainer.end_lineno - trainer.lineno + 1 <= 350
    long = {m.name: m.end_lineno - m.lineno + 1 for m in trainer.body
            if isinstance(m, ast.FunctionDef) and m.end_lineno - m.lineno + 1 > 40}
    assert not long, long


def test_one_api_from_a_baseline_given_in_python_or_a_shipped_name():
    from date_engine import baseline, load_spec, plan_for
    from date_engine.plan import derive_plan

    spec = baseline(batch_size=256, lr=1e-3, warmup_epochs=0.25, epochs=10,
                    dataset_size=60_000, optimizer="adamw", weight_decay=0.01)
    run = plan_for(spec, batch=8192, devices=8, micro_batch=256)
    assert run.plan == derive_plan(spec, 8192)  # the plan's one derivation
    assert run.plan.warmup_epochs == 8 and run.plan.optimizer.options["weight_decay"] > 0.01
    assert (run.split.micro_batch, run.split.world_size, run.split.accumulation_steps) == \
        (256, 8, 4)
    assert plan_for(spec, devices=8, micro_batch=256).split.batch == 2048  # devices × micro
    assert load_spec("lenet-mnist") == load_spec(ROOT / "recipes" / "lenet-mnist.yaml")
    assert plan_for("lenet-mnist", 8192, overrides=["date.rule=paper"]).plan.lr_exponent == 0.5
    with pytest.raises(date_engine.SpecError, match="no shipped baseline of that name"):
        load_spec("lenet-mnsit")
    with pytest.raises(date_engine.SpecError, match="baseline.optimizer.*betas"):
        baseline(batch_size=256, lr=1e-3, epochs=1, optimizer="sgd", betas=[0.9, 0.99])
    with pytest.raises(date_engine.PlanError, match="give batch, or devices and micro_batch"):
        plan_for(spec, devices=8)


def test_the_noise_scale_hook_reads_what_a_loop_already_has():
    """NoiseScale fed with the squared norms a data-parallel loop has (each micro-batch's
    gradient and the step's mean) recovers tr(Σ)/|G|² of gradients drawn with a known one."""
    import torch

    from date_engine import NoiseScale

    gen = torch.Generator().manual_seed(0)
    dim, micro, n = 1000, 8, 4
    true_g, sigma2 = torch.full((dim,), 0.1), 4.0  # |G|² = 10; a sample's variance per coordinate
    noise = NoiseScale(half_life=2000)
    for _ in range(400):
        grads = [true_g + torch.randn(dim, generator=gen) * (sigma2 / micro) ** 0.5
                 for _ in range(n)]
        small = sum(float(g.square().sum()) for g in grads) / n
        big = float(torch.stack(grads).mean(0).square().sum())
        noise.update(small, big, micro, micro * n)
    expected = sigma2 * dim / float(true_g.square().sum())  # tr(Σ) / |G|²
    # bound: statistical: a step's |G|² estimate (|G|² = 10) has σ ≈ 8 here (|G_b|² of 8
    # samples σ ≈ 22, of 32 σ ≈ 5.6, in (32·S − 8·s)/24); the average over ~180 steps' worth
    # (half-life 62 steps) σ ≈ 6%, the ratio's about as much: 0.35 is 5σ, and the draws are
    # seeded (torch's CPU generator gives them on any machine)
    assert noise.scale == pytest.approx(expected, rel=0.35)
