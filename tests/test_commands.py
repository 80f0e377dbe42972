"""What `date plan` and `date scale` decide, called directly (date_engine/commands.py), and the
Python entry to the bundled trainer (`train_run`): the run derived once and handed on as it is."""

from __future__ import annotations

import json

import pytest

from date_engine import DateError, PlanError, RunPlan, load_spec, plan_for, train_run
from date_engine.commands import plan_report, scale_config
from date_engine.spec import spec_with
from tests.conftest import RECIPES
from tests.runs import SHORT

DIGITS = str(RECIPES / "lenet-digits.yaml")


def test_plan_report_holds_the_run_date_plan_shows_and_what_the_flags_add():
    report = plan_report(DIGITS, 256, devices=2, micro_batch=32, compare=True)
    assert report.run == plan_for(DIGITS, 256, devices=2, micro_batch=32)
    assert report.recipe.name == "lenet-digits" and report.spec_call == repr(DIGITS)
    assert set(report.others) == {"paper", "linear"}
    assert report.others["linear"].peak_lr == pytest.approx(16 * report.spec.baseline.lr)
    assert (report.times, report.memory, report.parameters) == (None, None, None)
    emitting = plan_report(DIGITS, 256, devices=2, compare=True, emit=True)
    assert emitting.others == {} and emitting.run.plan == report.run.plan
    with pytest.raises(DateError, match="--link goes with --bench"):
        plan_report(DIGITS, 256, link="10GB/s")


def test_scale_config_derives_the_run_once_and_hands_it_to_every_process(tmp_path):
    job = scale_config(DIGITS, 256, nproc=2, overrides=["train.checkpoint_every=4"],
                       output_dir=tmp_path / "run", max_steps=3)
    expected = plan_for(spec_with(DIGITS, ["train.checkpoint_every=4"]), 256, devices=2)
    assert RunPlan.from_dict(job.config.run) == expected
    assert (job.config.world_size, job.config.output_dir, job.config.max_steps) == \
        (2, str(tmp_path / "run"), 3)
    assert (job.launch.nproc, job.launch.world_size, job.auto_resume) == (2, 2, False)
    with pytest.raises(PlanError, match="larger than the data set"):
        scale_config(DIGITS, 4096, output_dir=tmp_path / "big")  # before any process starts
    assert not (tmp_path / "big").exists()


def test_scale_config_leaves_the_run_to_the_processes_where_n_comes_with_the_data(tmp_path):
    """gpt-char's recipe does not know n; without baseline.dataset_size each process derives
    the run once its data is loaded."""
    raw = (RECIPES / "gpt-char.yaml").read_text()
    spec = tmp_path / "no-n.yaml"
    spec.write_text("\n".join(line for line in raw.splitlines()
                              if not line.strip().startswith("dataset_size")))
    assert load_spec(spec).baseline.dataset_size is None
    assert scale_config(str(spec), 96, output_dir=tmp_path / "run").config.run is None


def test_train_run_trains_the_run_it_is_given_and_returns_its_summary(tmp_path):
    spec = spec_with(DIGITS, [s for s in SHORT if s != "--set"])
    run = plan_for(spec, 64)
    summary = train_run(spec, run, tmp_path / "run", max_steps=3)
    assert (summary.steps, summary.total_steps, summary.stopped_by) == \
        (3, run.plan.total_iterations, "max-steps")
    assert RunPlan.from_dict(summary.plan) == run
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert "run" not in record and record["batch"] == 64  # the run is plan.json's, once
    assert RunPlan.from_dict(json.loads((tmp_path / "run" / "plan.json").read_text())) == run
    again = train_run(spec, run, tmp_path / "run", resume=True)
    assert again.finished and again.steps == run.plan.total_iterations
    other = spec_with(spec, ["baseline.lr=0.5"])
    with pytest.raises(DateError, match="a plan of another baseline"):
        train_run(other, run, tmp_path / "other")
