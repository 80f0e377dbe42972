"""The gradient noise scale measured in every run (date_engine/noise.py, train/step.py).

The end-to-end tests train a least-squares problem whose |G|² and tr(Σ) have closed forms
(tests/noise_recipes.py) at a learning rate too small to move the weights, so every step measures
the same quantities; the estimate averaged over the run must be within 10% of the exact values.
"""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest

from date_engine.noise import NoiseScale, unbiased
from date_engine.runfolder import RunFolder
from tests import noise_recipes
from tests.runs import date

LEAST_SQUARES = """\
recipe: tests.noise_recipes:least_squares
baseline:
  batch_size: 64
  lr: 1.0e-9
  warmup_epochs: 0
  iterations: 400
  optimizer: {name: sgd}
date: {lr_floor: 1.0e-12}
train: {log_every: 1}
"""


@pytest.mark.parametrize("nproc", [1, 2], ids=["one process, 4 accumulation steps",
                                               "two processes (gloo), 2 accumulation steps each"])
def test_the_estimate_matches_the_closed_form(nproc, write_spec, tmp_path):
    spec = write_spec(LEAST_SQUARES)
    out = tmp_path / "run"
    result = date("scale", spec, "--batch", 64, "--micro-batch", 16, "--nproc", nproc, "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    records = [r for r in RunFolder(out).read_metrics() if "grad_sq" in r]
    assert len(records) == 400
    grad_sq = statistics.fmean(r["grad_sq"] for r in records)
    trace = statistics.fmean(r["grad_trace"] for r in records)
    exact_sq, exact_trace = noise_recipes.exact()
    assert grad_sq == pytest.approx(exact_sq, rel=0.10)
    assert trace == pytest.approx(exact_trace, rel=0.10)
    assert trace / grad_sq == pytest.approx(exact_trace / exact_sq, rel=0.10)
    # the logged noise scale is the ratio of the smoothed averages of the step
    last = records[-1]
    assert last["noise_scale"] == pytest.approx(last["grad_trace"] / last["grad_sq"])
    # the checkpoint carries the averages, so that a resumed run goes on with them
    payload = json.loads(json.dumps(_last_checkpoint(out)["noise"]))
    assert payload["steps"] == 400


def _last_checkpoint(out):
    import torch

    from date_engine.train import checkpoint as ckpt

    found = ckpt.newest_valid(RunFolder(out))
    assert found is not None
    return {k: v for k, v in found.payload.items() if not isinstance(v, torch.Tensor)}


def test_one_gradient_per_step_is_not_measured(write_spec, tmp_path):
    spec = write_spec(LEAST_SQUARES.replace("iterations: 400", "iterations: 3"))
    out = tmp_path / "run"
    result = date("scale", spec, "--batch", 64, "--micro-batch", 64, "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "noise scale is not measured" in " ".join(result.stdout.split())
    assert not any("grad_sq" in r for r in RunFolder(out).read_metrics())


def test_unbiased_estimates_invert_the_expectations():
    # E|g_b|² = |G|² + tr(Σ)/b exactly recovers both from two batch sizes
    g2, trace = 0.7, 40.0
    small, big = g2 + trace / 8, g2 + trace / 256
    assert unbiased(small, big, 8, 256) == pytest.approx((g2, trace))
    with pytest.raises(ValueError):
        unbiased(small, big, 256, 256)


def test_the_averages_are_bias_corrected_and_skip_non_finite_samples():
    noise = NoiseScale(half_life=1000)
    assert noise.estimate is None and noise.scale is None
    g2, trace = 0.5, 20.0
    for _ in range(3):  # a constant input averages to itself from the first step on
        assert noise.update(g2 + trace / 4, g2 + trace / 64, 4, 64)
        assert noise.estimate.grad_sq == pytest.approx(g2)
        assert noise.scale == pytest.approx(trace / g2)
    assert not noise.update(math.inf, 1.0, 4, 64)  # an fp16 overflow leaves the averages alone
    assert noise.steps == 3 and noise.scale == pytest.approx(trace / g2)


def test_the_ratio_is_taken_after_smoothing():
    """Noisy |G|² estimates around a small mean: the average of per-step ratios is ruined by
    near-zero and negative values, the ratio of averages is not."""
    rng = random.Random(0)
    noise = NoiseScale(half_life=64 * 200)
    g2, trace, b, big = 0.01, 10.0, 8, 64
    for _ in range(4000):
        # s and S fluctuate around their expectations; S is the more precise (a bigger batch)
        small = (g2 + trace / b) * (1 + 0.02 * rng.gauss(0, 1))
        large = (g2 + trace / big) * (1 + 0.005 * rng.gauss(0, 1))
        noise.update(small, large, b, big)
    assert noise.scale == pytest.approx(trace / g2, rel=0.25)


def test_the_half_life_counts_samples_and_spans_a_few_steps():
    noise = NoiseScale(half_life=1000, min_steps=4)
    assert noise.decay(100) == pytest.approx(0.5 ** 0.1)
    assert noise.decay(10) == pytest.approx(0.5 ** 0.01)
    assert noise.decay(1000) == pytest.approx(0.75)  # never fewer than ~4 steps averaged
    state = noise.state_dict()
    again = NoiseScale(half_life=1000)
    noise.update(3.0, 1.0, 4, 64)
    again.load_state_dict(noise.state_dict())
    assert again.estimate == noise.estimate and state["steps"] == 0
