"""Every field the `--from` readers take (HF's TrainingArguments JSON, timm's args.yaml, and
`baseline_from_hf` / `baseline_from_timm` in Python) is checked in one place: a wrong type, 0,
a negative, NaN, ±inf or a huge value is one sentence naming the field as the file names it
(exit 2 from `date plan --from`), never a traceback; and the values that mean something are read
as they mean it (a ratio stays a ratio, a schedule ends at or below its peak)."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from date_engine.baselines import baseline_from_hf, baseline_from_timm
from date_engine.cli import app
from date_engine.errors import SpecError

KINDS = {"text": "x", "bool": True, "list": [1], "zero": 0, "negative": -1, "nan": math.nan,
         "inf": math.inf, "-inf": -math.inf, "huge": 1e308}
"""The bad values every field is fed, unless the field takes that one."""

HF = {"per_device_train_batch_size": 16, "gradient_accumulation_steps": 1, "learning_rate": 1e-3,
      "num_train_epochs": 2, "max_steps": -1, "warmup_steps": 0, "warmup_ratio": 0.0,
      "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8,
      "max_grad_norm": 1.0, "lr_scheduler_type": "linear", "optim": "adamw_torch"}
HF_FIELDS = {  # field: the kinds it takes (or what it must be set beside to be read)
    "per_device_train_batch_size": (), "gradient_accumulation_steps": (), "learning_rate": (),
    "num_train_epochs": (), "max_steps": ("zero", "negative"), "warmup_steps": ("zero",),
    "warmup_ratio": ("zero",), "weight_decay": ("zero",), "adam_beta1": ("zero",),
    "adam_beta2": ("zero",), "adam_epsilon": (), "max_grad_norm": ("zero",),
}
HF_KWARGS = {  # lr_scheduler_type: (kwarg, the kinds it takes)
    "polynomial": [("power", ()), ("lr_end", ("zero",))],
    "cosine_with_min_lr": [("min_lr_rate", ("zero",))],
}

TIMM = {"batch_size": 32, "epochs": 10, "lr": 0.1, "opt": "sgd", "momentum": 0.9,
        "weight_decay": 1e-4, "sched": "step", "decay_epochs": 3, "decay_rate": 0.1,
        "warmup_epochs": 1, "min_lr": 0.0, "clip_grad": 1.0, "grad_accum_steps": 1,
        "cooldown_epochs": 0}
TIMM_FIELDS = {
    "batch_size": (), "epochs": (), "lr": (), "momentum": ("zero",), "weight_decay": ("zero",),
    "decay_epochs": (), "decay_rate": (), "warmup_epochs": ("zero",), "min_lr": ("zero",),
    "clip_grad": ("zero",), "grad_accum_steps": (), "cooldown_epochs": ("zero",),
}


def _cases(fields, kwargs=None):
    for field, takes in fields.items():
        for kind in KINDS:
            if kind not in takes:
                yield field, None, kind
    for schedule, pairs in (kwargs or {}).items():
        for name, takes in pairs:
            for kind in KINDS:
                if kind not in takes:
                    yield name, schedule, kind


def _one_sentence(text: str, *words: str) -> None:
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    for word in words:
        assert word in text, (word, text)


READERS = {"hf": (baseline_from_hf, HF, "TrainingArguments", "args.json", json.dumps, 1024, 64),
           "timm": (baseline_from_timm, TIMM, "args.yaml", "args.yaml", yaml.safe_dump, 50_000,
                    256)}
"""reader: (the Python reader, a good configuration, the name its messages give it, its file,
how the file is written, the training samples, a target batch)."""


@pytest.mark.parametrize("reader, field, schedule, kind",
                         [("hf", *case) for case in _cases(HF_FIELDS, HF_KWARGS)]
                         + [("timm", *case) for case in _cases(TIMM_FIELDS)])
def test_a_bad_field_is_one_sentence_naming_it(tmp_path, reader, field, schedule, kind):
    read, good, source, name, write, samples, batch = READERS[reader]
    args = dict(good)
    if schedule is None:
        args[field] = KINDS[kind]
    else:
        args.update(lr_scheduler_type=schedule, lr_scheduler_kwargs={field: KINDS[kind]})
    with pytest.raises(SpecError) as refused:
        read(args, train_samples=samples)
    _one_sentence(str(refused.value), source, field)
    path = tmp_path / name
    path.write_text(write(args))
    done = CliRunner().invoke(app, ["plan", "--from", str(path), "--train-samples", str(samples),
                                    "--batch", str(batch)], env={"COLUMNS": "300"})
    assert done.exit_code == 2, done.output
    _one_sentence(done.output, field)


def test_the_fields_as_they_mean_it():
    """warmup_ratio 0.5 is half the run (as is warmup_steps 0.5 in transformers 5), 1.0 the whole
    of it, refused in the field's own name; a batch of 16.7 or true is refused, 16.0 is 16; a
    schedule may not end above its LR; a dict without max_grad_norm clips at HF's default 1.0."""
    with pytest.raises(SpecError, match=r"warmup_ratio 1.0 warms up for 100 steps of the run's "
                                        r"100, so it never trains at its peak"):
        baseline_from_hf({**HF, "max_steps": 100, "warmup_ratio": 1.0}, 1024)
    with pytest.raises(SpecError, match="warmup_epochs 10 is not shorter than epochs 10"):
        baseline_from_timm({**TIMM, "warmup_epochs": 10}, 50_000)
    assert baseline_from_hf({**HF, "max_steps": 100, "warmup_steps": 10.7}, 1024).baseline\
        .warmup_epochs * 1024 / 16 == 10  # HF's int(warmup_steps)
    for args in ({"warmup_ratio": 0.5}, {"warmup_steps": 0.5}):
        half = baseline_from_hf({**HF, "max_steps": 100, **args}, 1024)
        assert half.baseline.warmup_epochs * 1024 / 16 == 50
    for bad in (16.7, True, "16"):
        with pytest.raises(SpecError, match="per_device_train_batch_size must be a whole"):
            baseline_from_hf({**HF, "per_device_train_batch_size": bad}, 1024)
    assert baseline_from_hf({**HF, "per_device_train_batch_size": 16.0}, 1024).baseline\
        .batch_size == 16
    with pytest.raises(SpecError, match="warmup_ratio must be a number from 0 to 1, got 2.0"):
        baseline_from_hf({**HF, "warmup_ratio": 2.0}, 1024)
    with pytest.raises(SpecError, match="lr_end must be a number from 0 to 0.001, got 0.002"):
        baseline_from_hf({**HF, "lr_scheduler_type": "polynomial",
                          "lr_scheduler_kwargs": {"lr_end": 2e-3}}, 1024)
    with pytest.raises(SpecError, match=r"lr_base 1e\+06, scaled 1e\+09× from lr_base_size to "
                                        r"the batch, gives lr 1e\+15; give lr itself"):
        baseline_from_timm({"batch_size": 10**9, "epochs": 10, "lr_base": 1e6,
                            "lr_base_size": 1}, 50_000)
    with pytest.raises(SpecError, match="min_lr must be a number from 0 to 0.1, got 0.2"):
        baseline_from_timm({**TIMM, "sched": "cosine", "min_lr": 0.2}, 50_000)
    unclipped = {k: v for k, v in HF.items() if k != "max_grad_norm"}
    assert baseline_from_hf(unclipped, 1024).train.grad_clip == 1.0


def test_a_schedule_ending_above_its_lr_is_refused_in_a_spec(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("baseline: {batch_size: 16, lr: 1.0e-3, warmup_epochs: 1, epochs: 4, "
                    "dataset_size: 1437, schedule: {name: cosine, final_lr: 2.0e-3}}\n")
    done = CliRunner().invoke(app, ["plan", str(spec), "--batch", "64"], env={"COLUMNS": "300"})
    assert done.exit_code == 2
    _one_sentence(done.output, "schedule.final_lr 0.002 is above baseline.lr 0.001")


@pytest.mark.parametrize("warmup", [0, 0.05, 0.5, 1, 10.7, 99])
def test_the_warmup_is_what_hfs_own_trainer_counts(warmup):
    """Checked by transformers itself where it installs: TrainingArguments.get_warmup_steps."""
    transformers = pytest.importorskip("transformers")
    args = transformers.TrainingArguments(output_dir="out", per_device_train_batch_size=16,
                                          max_steps=100, warmup_steps=warmup)
    read = baseline_from_hf(args, train_samples=1024)
    assert round(read.baseline.warmup_epochs * 1024 / 16) == args.get_warmup_steps(100)
