"""``train.micro_batch: auto``: the largest micro-batch that fits, found by trying it at the start
of the run (the real torch.OutOfMemoryError and the real back-off path, on a recipe whose forward
raises it above a size), the global batch unchanged, the choice kept on resume."""

from __future__ import annotations

import json
import os

import pytest

from date_engine.runplan import halvings
from tests.conftest import ROOT
from tests.runs import SHORT, SPEC, date

OOM = "tests.fault_recipes:lenet_digits_oom"


def test_the_sizes_tried_halve_through_divisors_of_the_share():
    assert halvings(256) == [256, 128, 64, 32, 16, 8, 4, 2, 1]
    assert halvings(90) == [90, 45, 18, 9, 3, 1]
    assert all(90 % m == 0 for m in halvings(90)) and halvings(1) == [1]


def _plan(out):
    split = json.loads((out / "plan.json").read_text())
    return split["micro_batch"], split["accumulation_steps"], split["world_size"]


@pytest.mark.slow
def test_the_largest_micro_batch_that_fits_is_found_and_kept_on_resume(tmp_path):
    out = tmp_path / "auto"
    args = ["scale", SPEC, "--batch", 256, *SHORT, "--set", "train.micro_batch=auto",
            "--set", "train.checkpoint_every=2", "--recipe", OOM, "-o", out]
    first = date(*args, "--max-steps", 4, env={"DATE_TEST_OOM_ABOVE": "40"})
    assert first.returncode == 0, first.stdout + first.stderr
    said = " ".join(first.stdout.split())
    assert "micro-batch 32 (train.micro_batch: auto): the largest that fit cpu of 256, 128, " \
        "64, 32 tried; 8 accumulation step(s) keep the batch." in said
    assert _plan(out) == (32, 8, 1)  # 32 × 1 process × 8 = 256: the plan's batch
    record = json.loads((out / "micro_batch.json").read_text())
    assert record == {"micro_batch": 32, "tried": [256, 128, 64, 32], "device": "cpu"}
    # resumed on a device that would now hold the whole share: the run keeps what it chose
    again = date(*args, "--max-steps", 8, "--resume", env={"DATE_TEST_OOM_ABOVE": "1000"})
    assert again.returncode == 0, again.stdout + again.stderr
    assert "as this run chose before" in " ".join(again.stdout.split())
    assert "resuming from" in again.stdout and _plan(out) == (32, 8, 1)


@pytest.mark.slow
def test_the_processes_of_a_job_take_the_smallest_choice(tmp_path):
    """Rank 1's device holds 20 samples, rank 0's everything: both pass 16 (the largest of 128's
    halvings that fits rank 1), 8 accumulation steps each: 16 × 2 × 8 = 256. The plan is derived
    once, by the command; the workers train it and only re-split it (derive_plan counted in every
    process, tests/derive_counter)."""
    out, derives = tmp_path / "two", tmp_path / "derives.log"
    run = date("scale", SPEC, "--batch", 256, "--nproc", 2, *SHORT, "--max-steps", 2,
               "--set", "train.micro_batch=auto", "--recipe", OOM, "-o", out,
               env={"DATE_TEST_OOM_ABOVE": "20", "DATE_TEST_OOM_RANK": "1",
                    "DATE_TEST_DERIVES": str(derives),
                    "PYTHONPATH": f"{ROOT / 'tests' / 'derive_counter'}{os.pathsep}{ROOT}"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(derives.read_text().splitlines()) == 1
    assert _plan(out) == (16, 8, 2)
    assert json.loads((out / "micro_batch.json").read_text())["micro_batch"] == 16


@pytest.mark.slow
def test_a_dry_run_with_auto_runs_on_its_own_tiny_split(tmp_path):
    run = date("scale", SPEC, "--batch", 256, "--set", "train.micro_batch=auto", "--dry-run",
               "-o", tmp_path / "dry")
    assert run.returncode == 0, run.stdout + run.stderr


def test_date_plan_says_the_micro_batch_is_found_when_the_run_starts():
    from typer.testing import CliRunner

    from date_engine.cli import app

    result = CliRunner().invoke(app, ["plan", SPEC, "--batch", "256", "--devices", "2", "--set",
                                      "train.micro_batch=auto"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    words = " ".join(result.output.split())
    assert "256 = 128 (micro-batch) × 2 (processes) × 1 (accumulation step); " \
        "train.micro_batch: auto: the run tries 128 per pass" in words
