"""DateTrainer trains the plan it was given or refuses: arguments that contradict the plan, and a
checkpoint saved under another plan, are refused before a step in one sentence naming both
values; continued under a new plan on purpose (replan=True), every later step runs at the new
plan's LR; a checkpoint cut short while it was saved is never resumed from."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from date_engine import plan_for
from date_engine.errors import DateError

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import _digits

from date_engine.integrations.hf import (
    COMPLETE,
    DateTrainer,
    last_checkpoint,
    training_arguments,
)


def _data():
    x, y, _, _ = _digits.digits()
    return [{"x": a, "labels": b} for a, b in zip(x, y)]


def _trainer(run, folder, replan=False, **overrides):
    args = training_arguments(run, str(folder), use_cpu=True, report_to="none",
                              save_strategy="steps", save_steps=10, disable_tqdm=True, seed=0,
                              data_seed=0, **overrides)
    return DateTrainer(model=_digits.MLP(), args=args, train_dataset=_data(), run=run,
                       replan=replan)


@pytest.mark.parametrize("overrides, says", [
    ({"max_grad_norm": 0.01}, "max_grad_norm 0.01 (the plan: 0.0, no clipping)"),
    ({"optim": "sgd"}, "optim 'sgd' (the plan trains adamw"),
    ({"weight_decay": 0.3}, "weight_decay 0.3 (the plan: 0.0282842"),
    ({"adam_beta2": 0.5}, "adam_beta2 0.5 (the plan: "),
    ({"adam_epsilon": 1e-3}, "adam_epsilon 0.001 (the plan: "),
    ({"lr_scheduler_kwargs": {"power": 2.0}}, "lr_scheduler_kwargs {'power': 2.0}"),
    ({"learning_rate": 0.1}, "learning_rate 0.1 (the plan: "),
])
def test_an_argument_against_the_plan_is_refused_before_a_step(tmp_path, overrides, says):
    run = _digits.plan(devices=1)
    trainer = _trainer(run, tmp_path, **overrides)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.raises(DateError) as refused:
        trainer.train()
    assert says in str(refused.value), str(refused.value)
    assert trainer.optimizer is None and not list(tmp_path.iterdir())
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_the_plans_own_arguments_and_an_adam_flavour_pass(tmp_path):
    run = _digits.plan(devices=1)
    _trainer(run, tmp_path).check_plan()
    _trainer(run, tmp_path, optim="adamw_torch_fused").check_plan()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A whole DateTrainer run of the batch-128 plan (32 steps), checkpointed every 10."""
    folder = tmp_path_factory.mktemp("b128")
    _trainer(_digits.plan(devices=1), folder).train()
    return folder


def _lrs(trainer):
    """(optimizer step, the LR it runs at) for every step the trainer takes."""
    from transformers import TrainerCallback

    seen = []

    class Record(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            seen.append((state.global_step + 1, trainer.optimizer.param_groups[0]["lr"]))

    trainer.add_callback(Record())
    return seen


def test_a_checkpoint_of_another_plan_is_refused_or_continued_on_purpose(saved, tmp_path):
    other = plan_for(_digits.BASELINE, 64, devices=1, micro_batch=32)
    folder = tmp_path / "b64"
    checkpoint = saved / "checkpoint-20"
    refused = _trainer(other, folder)
    with pytest.raises(DateError) as why:
        refused.train(resume_from_checkpoint=str(checkpoint))
    text = str(why.value)
    assert "another plan (batch 128, 32 steps" in text and "(batch 64, 64 steps" in text
    assert "replan=True" in text and refused.optimizer is None

    replanned = _trainer(other, folder, replan=True)
    seen = _lrs(replanned)
    replanned.train(resume_from_checkpoint=str(checkpoint))
    # 20 steps of 128 samples = 2560 = 40 steps of 64: the new plan's steps 41..64 follow
    assert [step for step, _ in seen] == list(range(41, other.last_step + 1))
    assert all(lr == other.plan.lr(step) for step, lr in seen), seen
    assert replanned.state.global_step == other.last_step
    group = replanned.optimizer.param_groups[0]  # loaded with the old plan's, then replanned
    assert tuple(group["betas"]) == tuple(other.plan.optimizer.options["betas"])
    assert group["weight_decay"] == other.plan.optimizer.options["weight_decay"]


def test_a_checkpoint_of_the_same_plan_on_other_devices_resumes(saved, tmp_path):
    """The split over devices is not the plan: the same plan at another micro-batch resumes."""
    run = _digits.plan(devices=1)
    halved = plan_for(_digits.BASELINE, 128, devices=1, micro_batch=16)
    assert halved.plan.identity == run.plan.identity and halved.split != run.split
    resumed = _trainer(halved, tmp_path)
    seen = _lrs(resumed)
    resumed.train(resume_from_checkpoint=str(saved / "checkpoint-30"))
    assert seen == [(step, run.plan.lr(step)) for step in (31, 32)]


def test_a_checkpoint_cut_short_is_passed_over(saved, tmp_path):
    """A save killed before its completion mark (as kill -9 mid-save leaves it) is never the
    one resumed from: resume_from_checkpoint=True takes the newest complete one."""
    folder = tmp_path / "run"
    shutil.copytree(saved, folder)
    (folder / "checkpoint-32" / COMPLETE).unlink()
    (folder / "checkpoint-40").mkdir()  # a folder HF had only begun
    with pytest.warns(UserWarning, match="cut short") as warned:
        assert last_checkpoint(folder) == str(folder / "checkpoint-30")
    assert [Path(str(w.message).split(":")[0]).name for w in warned] == ["checkpoint-40",
                                                                         "checkpoint-32"]
    run = _digits.plan(devices=1)
    resumed = _trainer(run, folder)
    seen = _lrs(resumed)
    with pytest.warns(UserWarning, match="cut short"):
        resumed.train(resume_from_checkpoint=True)
    assert [step for step, _ in seen] == [31, 32]
    assert json.loads((folder / "checkpoint-32" / COMPLETE).read_text()) == run.plan.summary()


def test_checkpoints_without_marks_count_when_hf_finished_them(saved, tmp_path):
    """A folder of plain HF checkpoints (none marked): those with trainer_state.json."""
    folder = tmp_path / "plain"
    for step in (10, 20):
        shutil.copytree(saved / f"checkpoint-{step}", folder / f"checkpoint-{step}")
        (folder / f"checkpoint-{step}" / COMPLETE).unlink()
    (folder / "checkpoint-20" / "trainer_state.json").unlink()
    with pytest.warns(UserWarning):
        assert last_checkpoint(folder) == str(folder / "checkpoint-10")
    assert last_checkpoint(tmp_path / "nothing") is None
    with pytest.raises(DateError, match="holds no complete checkpoint"):
        _trainer(_digits.plan(devices=1), tmp_path / "empty").train(resume_from_checkpoint=True)


@pytest.mark.parametrize("path, share, says", [
    ("a-file/probe.json", None, "is a file, so no folder can be made under it"),
    (".", None, "is a folder"),
    ("probe.json", "0.5", "DateProbe: share must be the share of the baseline's steps"),
    ("probe.json", 0.0, "share must be a fraction"),
    ("probe.json", float("nan"), "share must be a fraction"),
])
def test_a_probe_that_could_not_be_written_is_refused_before_the_run(tmp_path, monkeypatch,
                                                                     path, share, says):
    """DateProbe checks where it will write before the run it measures, not after it."""
    from date_engine.integrations.hf import DateProbe
    from date_engine.integrations.lightning import DateProbe as LightningProbe

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(DateError, match=says):
        DateProbe(path, train_samples=1024, share=share)
    with pytest.raises(DateError, match=says):
        LightningProbe(path, "lenet-digits", share=share)


def test_seq2seq_arguments_stay_seq2seq_and_plan_for_reads_the_specs_recipe():
    """training_arguments keeps base's class; plan_for of a spec naming a recipe takes the
    recipe's sample count, as date plan does."""
    import transformers

    from date_engine import load_spec

    run = _digits.plan(devices=1)
    base = transformers.Seq2SeqTrainingArguments(output_dir="out", predict_with_generate=True)
    scaled = training_arguments(run, base=base)
    assert isinstance(scaled, transformers.Seq2SeqTrainingArguments)
    assert scaled.predict_with_generate and scaled.max_steps == run.last_step
    spec = load_spec("lenet-digits", ["baseline.dataset_size=null"])
    assert spec.baseline.dataset_size is None and spec.recipe == "lenet-digits"
    assert plan_for(spec, 256).plan.total_iterations == plan_for("lenet-digits", 256).plan\
        .total_iterations
