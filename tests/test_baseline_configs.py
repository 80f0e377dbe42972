"""The baseline read from a Hugging Face TrainingArguments, and the parameter groups a baseline's
trainer makes (weight decay off for biases and norm weights), kept by date_engine."""

from __future__ import annotations

import math

import pytest
import torch

from date_engine import baseline_from_hf, optimizer_for, plan_for, scheduler_for
from date_engine.errors import SpecError
from date_engine.plan import derive_plan
from tests.bounds import float64_formula

transformers = pytest.importorskip("transformers")

SAMPLES = 6400


def hf_args(tmp_path, **given):
    values = dict(output_dir=str(tmp_path / "hf"), per_device_train_batch_size=16,
                  gradient_accumulation_steps=2, learning_rate=3e-4, weight_decay=0.1,
                  lr_scheduler_type="cosine", warmup_steps=0.05, num_train_epochs=2,
                  report_to="none", use_cpu=True)
    return transformers.TrainingArguments(**{**values, **given})


def test_a_cosine_run_over_two_devices_reads_as_the_spec_a_user_would_write(tmp_path):
    spec = baseline_from_hf(hf_args(tmp_path), SAMPLES, world_size=2)
    base = spec.baseline
    steps = 2 * math.ceil(math.ceil(SAMPLES / 2 / 16) / 2)  # HF: 100 batches a process, 50 steps
    assert (base.batch_size, base.lr, base.iterations, base.dataset_size) == \
        (2 * 16 * 2, 3e-4, steps, SAMPLES) == (64, 3e-4, 200, 6400)
    assert base.warmup_epochs * SAMPLES / 64 == pytest.approx(10)  # ⌈0.05 · 200⌉ steps
    assert base.schedule.name == "cosine" and base.schedule.shape(3e-4).index == "torch"
    options = base.optimizer
    assert (options.name, options.weight_decay, options.betas, options.eps) == \
        ("adamw", 0.1, (0.9, 0.999), 1e-8)
    assert options.decay_biases_and_norms is False  # HF's Trainer exempts them
    assert spec.train.grad_clip == 1.0  # HF's default clipping, kept


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x, labels=None):
        logits = self.head(self.norm(self.embed(x)))
        loss = torch.nn.functional.cross_entropy(logits, labels)
        return {"loss": loss, "logits": logits}


def test_at_k_1_the_plan_trains_the_lrs_and_groups_of_hfs_own_trainer(tmp_path):
    """The same LR at each of the run's optimizer steps (≥ 20) and the same parameters with and
    without weight decay as HF's plain Trainer builds from the same arguments."""
    args = hf_args(tmp_path, num_train_epochs=1, lr_scheduler_type="cosine_with_min_lr",
                   lr_scheduler_kwargs={"min_lr": 3e-5})
    spec = baseline_from_hf(args, SAMPLES, world_size=2)
    run = plan_for(spec, batch=spec.baseline.batch_size)
    assert run.plan.scale == 1 and run.plan.total_iterations == 100 >= 20
    model = Tiny()
    trainer = transformers.Trainer(model=model, args=args)
    trainer.create_optimizer_and_scheduler(num_training_steps=run.plan.total_iterations)
    ours = optimizer_for(model, run, date=False)
    names = {id(p): n for n, p in model.named_parameters()}

    def groups(opt):
        return {g["weight_decay"]: sorted(names[id(p)] for p in g["params"])
                for g in opt.param_groups}
    assert groups(ours) == groups(trainer.optimizer) == {
        0.1: ["embed.weight", "head.weight"], 0.0: ["embed.bias", "head.bias", "norm.bias",
                                                  "norm.weight"]}
    schedule = scheduler_for(ours, run)
    for step in range(1, run.plan.total_iterations + 1):
        theirs = [g["lr"] for g in trainer.optimizer.param_groups]
        # bound: both evaluate the cosine in at most 40 float64 operations
        assert [g["lr"] for g in ours.param_groups] == pytest.approx(
            theirs, rel=float64_formula(40)), step
        for opt in (ours, trainer.optimizer):
            opt.step()
        schedule.step()
        trainer.lr_scheduler.step()


def test_decay_exemptions_reach_date_and_the_plan_document(lenet_raw):
    lenet_raw["baseline"]["optimizer"] = {"name": "adamw", "weight_decay": 0.05,
                                          "decay_biases_and_norms": False}
    from date_engine import parse_spec

    plan = derive_plan(parse_spec(lenet_raw), 8192)
    assert plan.optimizer.decay_exempt and plan.to_dict()["optimizer"]["decay_exempt"] is True
    model = Tiny()
    dated = optimizer_for(model, plan)
    decays = {round(g["weight_decay"], 12): len(g["params"]) for g in dated.param_groups}
    assert decays == {round(plan.optimizer.options["weight_decay"], 12): 2, 0.0: 4}
    lenet_raw["baseline"]["optimizer"].pop("decay_biases_and_norms")
    plain = derive_plan(parse_spec(lenet_raw), 8192)
    assert "decay_exempt" not in plain.to_dict()["optimizer"]  # earlier plans read as before
    assert len(optimizer_for(model, plain).param_groups) == 1


@pytest.mark.parametrize("given, words", [
    (dict(optim="adafactor"), "optim 'adafactor' has no counterpart"),
    (dict(lr_scheduler_type="cosine_with_restarts"), "'cosine_with_restarts'"),
])
def test_what_has_no_counterpart_is_one_sentence(tmp_path, given, words):
    with pytest.raises(SpecError, match=words):
        baseline_from_hf(hf_args(tmp_path, **given), SAMPLES)


def test_wrong_arguments_name_the_parameter(tmp_path):
    with pytest.raises(SpecError, match="train_samples must be"):
        baseline_from_hf(hf_args(tmp_path), "6400")
    with pytest.raises(SpecError, match="args must be a TrainingArguments"):
        baseline_from_hf([1], SAMPLES)
