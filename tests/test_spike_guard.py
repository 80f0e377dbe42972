"""The spike guard of `date scale` (train/guard.py): a forced spike rolls the run back to its last
checkpoint, bit for bit, with the LR lowered and the rollback recorded; a spike that keeps coming
back stops the run with its checkpoints intact."""

from __future__ import annotations

import json

import pytest
import torch

from tests.runs import SHORT, SPEC, date

pytestmark = pytest.mark.slow  # each test starts `date scale` processes

SPIKY = [*SHORT, "--set", "train.checkpoint_every=10", "--set", "train.log_every=1",
         "--recipe", "tests.fault_recipes:lenet_digits_spike"]


def _scale(out, *extra, spike_at=0, spike_for=3):
    return date("scale", SPEC, "--batch", 256, *SPIKY, "-o", out, *extra,
                env={"DATE_TEST_SPIKE_AT": str(spike_at), "DATE_TEST_SPIKE_FOR": str(spike_for)})


def _weights(out):
    newest = sorted((out / "checkpoints").glob("step-*.pt"))[-1]
    return torch.load(newest, weights_only=False)


def _records(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_rolled_back_spike_leaves_the_run_bit_for_bit_as_if_it_never_happened(tmp_path):
    """With the LR left as it was (factor 1), the run that spiked at steps 31–33 and went back
    to step 30 ends with the weights of the run that never spiked: the rollback restores the
    state, the random streams and the data order exactly."""
    clean = _scale(tmp_path / "clean", "--set", "train.spike_lr_factor=1")
    spiked = _scale(tmp_path / "spiked", "--set", "train.spike_lr_factor=1", spike_at=31)
    assert clean.returncode == 0 and spiked.returncode == 0, spiked.stderr
    assert "step 33: the loss rose" in spiked.stdout and "rolled back to step 30" in spiked.stdout
    a, b = _weights(tmp_path / "clean"), _weights(tmp_path / "spiked")
    assert a["step"] == b["step"] == 57
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    summary = json.loads((tmp_path / "spiked" / "summary.json").read_text())
    assert [(r["at_step"], r["back_to"], r["lr_scale"]) for r in summary["rollbacks"]] == \
        [(33, 30, 1.0)]
    assert json.loads((tmp_path / "clean" / "summary.json").read_text())["rollbacks"] == []
    # the spiked steps' records gave way to the rollback's: the file reads as one run
    steps = [r["step"] for r in _records(tmp_path / "spiked") if "loss" in r]
    assert steps == sorted(steps) and len(steps) == len(set(steps)) == 57


def test_a_rollback_lowers_the_lr_from_there_is_reported_and_kept_on_resume(tmp_path):
    out = tmp_path / "run"
    result = _scale(out, "--max-steps", 45, spike_at=31)
    assert result.returncode == 0, result.stderr
    assert "spike guard: at step 33" in result.stdout  # the run's report at its end
    plan = json.loads((out / "plan.json").read_text())
    lrs = {r["step"]: r["lr"] for r in _records(out) if "lr" in r}
    spike = next(r["spike"] for r in _records(out) if "spike" in r)
    assert spike["back_to"] == 30 and spike["lr_scale"] == 0.5
    from date_engine.runplan import RunPlan

    schedule = RunPlan.from_dict(plan).plan
    assert lrs[30] == schedule.lr(30) and lrs[31] == 0.5 * schedule.lr(31)
    resumed = _scale(out, "--resume")  # the lowered LR rides in the checkpoint
    assert resumed.returncode == 0, resumed.stderr
    assert {r["step"]: r["lr"] for r in _records(out) if "lr" in r}[50] == 0.5 * schedule.lr(50)


def test_a_spike_that_keeps_coming_back_stops_the_run_with_its_checkpoints_intact(tmp_path):
    out = tmp_path / "run"
    result = _scale(out, spike_at=31, spike_for=10**6)
    assert result.returncode == 3
    assert "after 3 rollbacks, each lowering the LR ×0.5" in result.stderr
    assert "train.spike_guard=false" in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.count("error:") == 1
    assert _weights(out)["step"] == 30  # the last good state, resumable
    failed = json.loads((out / "FAILED.json").read_text())
    assert failed["exit_code"] == 3
    off = _scale(tmp_path / "off", "--set", "train.spike_guard=false", spike_at=31, spike_for=5)
    assert off.returncode == 0 and "rolled back" not in off.stdout  # trained through
    early = _scale(tmp_path / "early", "--set", "train.checkpoint_every=100", spike_at=31)
    assert early.returncode == 0, early.stderr  # nothing to go back to yet: said, trained on
    assert "no checkpoint of this run to roll back to yet" in early.stdout
