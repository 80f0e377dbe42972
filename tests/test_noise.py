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


@pytest.mark.slow
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
    # bound: statistical: at |δ| = 1 a step's estimate of |G|² = 1 from micro-batches of 16 in
    # a batch of 64 has σ ≈ 0.65 (tests/noise_recipes.py's design: Σ ≈ 2I + δδᵀ), so the mean
    # over 400 steps σ ≈ 3–4%, tr(Σ) = 33's less; 0.10 is 2.5–3σ of another seed, and the run
    # is seeded (float32's rounding moves this one by ~1e-6)
    assert grad_sq == pytest.approx(exact_sq, rel=0.10)
    assert trace == pytest.approx(exact_trace, rel=0.10)
    assert trace / grad_sq == pytest.approx(exact_trace / exact_sq, rel=0.10)
    # the logged noise scale is the ratio of the smoothed averages of the step
    last = records[-1]
    assert last["noise_scale"] == pytest.approx(last["grad_trace"] / last["grad_sq"])
    # the checkpoint carries the averages, so that a resumed run goes on with them
    payload = json.loads(json.dumps(_last_checkpoint(out)["noise"]))
    assert payload["steps"] == 400


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2], ids=["one process", "two processes (gloo)"])
def test_the_probe_measures_pairs_of_steps_against_the_closed_form(nproc, write_spec, tmp_path):
    """At an LR too small to move the weights consecutive steps have the same true gradient, so
    the pair's |G|² is |G|² itself; the product is of the all-reduced gradients."""
    spec = write_spec(LEAST_SQUARES)
    out = tmp_path / "probe"
    result = date("probe", spec, "--share", "1", "--micro-batch", 16, "--nproc", nproc, "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    records = [r for r in RunFolder(out / "run").read_metrics() if "grad_sq_pair" in r]
    assert len(records) == 399  # the first step has no previous one
    exact_sq, _ = noise_recipes.exact()
    # bound: as in the test above: the pair product of two batches of 64 has σ ≈ 0.3 a step
    pair = statistics.fmean(r["grad_sq_pair"] for r in records)
    assert pair == pytest.approx(exact_sq, rel=0.1)


def _last_checkpoint(out):
    import torch

    from date_engine.train import checkpoint as ckpt

    found = ckpt.newest_valid(RunFolder(out))
    assert found is not None
    return {k: v for k, v in found.payload.items() if not isinstance(v, torch.Tensor)}


@pytest.mark.slow
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


def test_pairs_of_steps_leave_a_period_two_oscillation_out():
    """Step gradients G_t = m + (−1)^t·o with o ⊥ m: a single step's signal is |m|² + |o|², the
    pair's |m|²; consecutive products are |m|² − |o|²."""
    m2, o2, trace = 0.2, 1.8, 50.0
    noise = NoiseScale(half_life=1000)
    small, big = _norms(m2 + o2, trace)
    assert noise.update(small, big, 64, 128, pair=0.0)  # the first step has no previous one
    assert noise.estimate.pair_grad_sq is None
    for _ in range(5):
        assert noise.update(small, big, 64, 128, pair=m2 - o2)
    assert noise.scale == pytest.approx(trace / (m2 + o2))
    assert noise.estimate.pair_scale == pytest.approx(trace / m2)  # 10× B_simple here
    # a left-out step breaks the chain: the next product pairs with a step not folded in
    assert not noise.update(math.inf, big, 64, 128, pair=math.inf)
    assert noise.update(small, big, 64, 128, pair=100.0)
    assert noise.estimate.pair_scale == pytest.approx(trace / m2)
    # a resume goes on with the pairs (the checkpoint keeps the previous gradient: the next
    # product is a real one), unless the run drops them (a checkpoint without that gradient)
    resumed, dropped = NoiseScale(half_life=1000), NoiseScale(half_life=1000)
    for copy in (resumed, dropped):
        copy.load_state_dict(json.loads(json.dumps(noise.state_dict())))
        assert copy.estimate == noise.estimate
    dropped.drop_pair()
    for copy in (noise, resumed, dropped):
        assert copy.update(small, big, 64, 128, pair=m2 - o2 + 5.0)
    assert resumed.estimate == noise.estimate
    assert dropped.estimate.pair_scale == pytest.approx(trace / m2)
    assert noise.estimate.pair_scale < trace / m2
    # where pairs are not measured there is no pair estimate
    plain = NoiseScale(half_life=1000)
    plain.update(small, big, 64, 128)
    assert plain.estimate.pair_grad_sq is None and plain.estimate.pair_scale is None


def _norms(grad_sq: float, trace: float) -> tuple[float, float]:
    """(s, S) of micro-batches of 64 in a batch of 128 whose unbiased estimates are these."""
    return grad_sq + trace / 64, grad_sq + trace / 128


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
    # bound: statistical: a step's |G|² estimate (64·S − 8·s)/56 has σ ≈ 0.0037 around 0.01;
    # averaged over ~580 steps (half-life 200 steps) σ ≈ 1.5%, the ratio's as much: 0.25 is
    # 16σ, and Python's generator is seeded (the same draws and arithmetic on any machine)
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
