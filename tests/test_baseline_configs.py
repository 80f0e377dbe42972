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


# ------------------------------------------------------------------ the plan back into HF's args

def test_training_arguments_from_the_baselines_keep_every_field_the_plan_does_not_set(tmp_path):
    from date_engine.integrations.hf import training_arguments

    args = hf_args(tmp_path, logging_steps=7, seed=11, max_grad_norm=0.5, adam_beta2=0.98,
                   lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"min_lr": 3e-5})
    run = plan_for(baseline_from_hf(args, SAMPLES, world_size=2), batch=512, devices=2)
    scaled = training_arguments(run, base=args)
    assert (scaled.logging_steps, scaled.seed, scaled.output_dir, scaled.report_to) == \
        (7, 11, args.output_dir, args.report_to)  # the user's own, kept
    plan = run.plan
    assert (scaled.per_device_train_batch_size * 2 * scaled.gradient_accumulation_steps,
            scaled.max_steps, scaled.learning_rate) == (512, plan.total_iterations, plan.peak_lr)
    assert scaled.max_grad_norm == plan.grad_clip == 0.5  # the baseline's clipping, kept
    assert scaled.adam_beta2 == plan.optimizer.options["betas"][1] != 0.98  # β2^k
    assert scaled.warmup_steps == math.ceil(plan.warmup_iterations)
    assert scaled.lr_scheduler_kwargs == {"min_lr_rate": pytest.approx(0.1)}  # 3e-5 of 3e-4


def test_one_clipping_reaches_emit_training_arguments_and_lightning(tmp_path, lenet_raw):
    from date_engine import parse_spec
    from date_engine.integrations import hf_arguments, lightning_settings
    from date_engine.integrations.hf import training_arguments

    lenet_raw.setdefault("train", {})["grad_clip"] = 2.5
    run = plan_for(parse_spec(lenet_raw), 8192)
    assert run.plan.grad_clip == 2.5 and run.plan.to_dict()["grad_clip"] == 2.5
    assert hf_arguments(run)["max_grad_norm"] == 2.5
    assert training_arguments(run, str(tmp_path)).max_grad_norm == 2.5
    assert lightning_settings(run)["trainer"]["gradient_clip_val"] == 2.5
    lenet_raw["train"].pop("grad_clip")
    unclipped = plan_for(parse_spec(lenet_raw), 8192)
    assert "grad_clip" not in unclipped.to_dict()  # stored plans read as before
    assert training_arguments(unclipped, str(tmp_path)).max_grad_norm == 0.0  # HF's 1.0 off


@pytest.mark.parametrize("given, says", [
    (dict(learning_rate=5e-5), "learning_rate 5e-05 (the plan: "),
    (dict(lr_scheduler_type="linear"), "lr_scheduler_type 'linear' (the plan: 'cosine')"),
    (dict(warmup_steps=0.5), "warmup steps (the plan: "),
])
def test_date_trainer_refuses_an_lr_curve_the_plan_would_replace(tmp_path, given, says):
    from date_engine.errors import DateError
    from date_engine.integrations.hf import DateTrainer, training_arguments

    args = hf_args(tmp_path)
    run = plan_for(baseline_from_hf(args, SAMPLES), batch=256)
    scaled = training_arguments(run, base=args, **given)
    trainer = DateTrainer(model=Tiny(), args=scaled, run=run,
                          train_dataset=[{"x": torch.ones(8), "labels": 0}] * 8)
    with pytest.raises(DateError, match="contradict the plan's LR curve") as refused:
        trainer.train()
    assert says in str(refused.value) and "training_arguments(run, base=args)" in \
        str(refused.value)
    assert trainer.optimizer is None  # refused before anything was built


# ------------------------------------------------------------------------------ timm's args.yaml

def timm_args(**given):
    args = {"batch_size": 128, "lr": None, "lr_base": 0.1, "lr_base_size": 256,
            "lr_base_scale": "", "opt": "sgd", "momentum": 0.9, "weight_decay": 2e-5,
            "sched": "cosine", "epochs": 300, "warmup_epochs": 5, "min_lr": 1e-5,
            "cooldown_epochs": 0, "clip_grad": None, "clip_mode": "norm", "grad_accum_steps": 1}
    return {**args, **given}


@pytest.mark.parametrize("opt, world, lr", [
    ("sgd", 8, 0.1 * 1024 / 256),           # timm scales SGD's lr_base linearly
    ("adamw", 8, 0.1 * (1024 / 256) ** 0.5),  # and Ada*/LAMB's by √
    ("lamb", 2, 0.1 * (256 / 256) ** 0.5),
])
def test_timm_lr_base_is_read_as_timm_scaled_it_at_the_baselines_batch(opt, world, lr):
    from date_engine import baseline_from_timm

    spec = baseline_from_timm(timm_args(opt=opt), 1_281_167, world_size=world)
    assert spec.baseline.batch_size == 128 * world
    assert spec.baseline.lr == pytest.approx(lr, rel=float64_formula(4))  # bound: 4 operations
    run = plan_for(spec, batch=8 * spec.baseline.batch_size)  # the rule's η, not timm's again
    assert run.plan.peak_lr == pytest.approx(
        8 ** run.plan.lr_exponent * spec.baseline.lr, rel=float64_formula(2))  # bound: k^p · η0


def test_timm_args_give_the_spec_a_user_would_write():
    from date_engine import baseline_from_timm

    spec = baseline_from_timm(timm_args(lr=0.5, clip_grad=1.0, sched="multistep",
                                        decay_milestones=[30, 60], decay_rate=0.1), 50_000)
    base = spec.baseline
    assert (base.lr, base.epochs, base.warmup_epochs, base.dataset_size) == (0.5, 300, 5, 50_000)
    assert (base.optimizer.name, base.optimizer.momentum) == ("nesterov", 0.9)  # timm's sgd
    assert base.optimizer.decay_biases_and_norms is False  # timm filters them too
    assert base.schedule.name == "multistep" and base.schedule.milestones == (30, 60)
    assert spec.train.grad_clip == 1.0
    cosine = baseline_from_timm(timm_args(), 50_000).baseline.schedule
    assert (cosine.name, cosine.final_lr) == ("cosine", 1e-5)


@pytest.mark.parametrize("given, says", [
    (dict(sched="plateau"), "sched 'plateau' has no counterpart"),
    (dict(opt="adafactor"), "opt 'adafactor' has no counterpart"),
    (dict(cooldown_epochs=10), "cooldown_epochs 10 has no counterpart"),
])
def test_what_timm_has_and_the_plan_has_not_is_one_sentence(given, says):
    from date_engine import baseline_from_timm

    with pytest.raises(SpecError, match=says):
        baseline_from_timm(timm_args(**given), 50_000)


# ------------------------------------------------------------------------------ date plan --from

def test_date_plan_from_the_runs_own_configuration(tmp_path):
    import json

    import yaml
    from typer.testing import CliRunner

    from date_engine.cli import app

    args = hf_args(tmp_path)
    (tmp_path / "hf-args.json").write_text(args.to_json_string())
    (tmp_path / "args.yaml").write_text(yaml.safe_dump(timm_args(opt="adamw")))
    runner = CliRunner()
    for name, devices, spec in (("hf-args.json", 2, baseline_from_hf(args, SAMPLES, 2)),
                                ("args.yaml", 2, None)):
        out = runner.invoke(app, ["plan", "--from", str(tmp_path / name), "--train-samples",
                                  str(SAMPLES), "--baseline-devices", str(devices), "--batch",
                                  "1024", "--json"])
        assert out.exit_code == 0, out.output
        shown = json.loads(out.stdout)
        if spec is not None:
            assert shown == plan_for(spec, 1024).to_dict() | {
                k: shown[k] for k in ("step", "sharding")}
        assert shown["baseline_batch"] == (64 if name.endswith("json") else 256)
    for argv, says in ((["--from", str(tmp_path / "args.yaml")], "needs --train-samples N"),
                       (["lenet-mnist", "--from", str(tmp_path / "args.yaml"),
                         "--train-samples", "9"], "give SPEC (lenet-mnist) or --from"),
                       ([], "give the baseline: SPEC"),
                       (["--from", str(tmp_path / "nope.json"), "--train-samples", "9"],
                        "nope.json")):
        out = runner.invoke(app, ["plan", *argv, "--batch", "1024"])
        assert out.exit_code == 2 and says in out.output, out.output
        assert "Traceback" not in out.output
