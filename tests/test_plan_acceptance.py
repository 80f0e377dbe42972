"""The acceptance values of docs/algorithm.md §2, which every implementation must reproduce.

The paper's values are exact reals (powers of two, decimal epochs); a derived float may differ
from its literal in the last bit or two, so peak LRs are compared to 1e-12 relative.
"""

from __future__ import annotations

import math

import pytest

from date_engine import load_spec
from date_engine.plan import derive_plan
from tests.bounds import float64_formula
from tests.conftest import RECIPES, lenet_spec

PAPER = ["date.rule=paper"]  # the acceptance values are the paper's rule


def test_lenet_worked_example():
    plan = derive_plan(lenet_spec(), 8192)
    assert plan.scale == 8
    assert plan.peak_lr == pytest.approx(1.25e-3 * math.sqrt(8), rel=float64_formula(4))
    assert f"{plan.peak_lr:.4e}" == "3.5355e-03"
    assert plan.warmup_epochs == 16.0
    assert plan.warmup_iterations == 117.1875  # the paper's "117 iterations"
    assert plan.total_iterations == 220
    assert plan.total_epochs == pytest.approx(1755 * 1024 / 60000)
    # Continuous at the end of warmup: with the misprinted denominator (1 - w0/E)·I the LR would
    # halve between steps 117 and 118.
    # bound: step 117 is epoch 117·8192/60000 = 15.974 of a 16-epoch warmup (1.6e-3 below the
    # peak), step 118 the first of the decay, η·(220 − 118)/(220 − 117.1875) (7.9e-3 below)
    assert plan.lr(117) == pytest.approx(plan.peak_lr, rel=2e-3)
    assert plan.lr(118) == pytest.approx(plan.peak_lr, rel=1e-2)


def test_lenet_recipe_is_the_worked_example():
    plan = derive_plan(load_spec(RECIPES / "lenet-mnist.yaml", PAPER), 8192)
    assert (plan.scale, plan.warmup_epochs, plan.warmup_iterations, plan.total_iterations) == (
        8, 16.0, 117.1875, 220)


# Table 3 of the paper: GNMT, B0 = 256, η0 = 2^-0.5 / 10^3, w0 = 0.0145 epochs, 2 epochs.
GNMT_TABLE = [
    # batch, peak LR · 10^3, warmup epochs
    (256, 2**-0.5, 0.0145),
    (512, 2**0.0, 0.0290),
    (1024, 2**0.5, 0.0580),
    (2048, 2**1.0, 0.1160),
    (4096, 2**1.5, 0.2320),
]


@pytest.mark.parametrize("batch, peak_e3, warmup", GNMT_TABLE)
def test_gnmt_table_3(batch, peak_e3, warmup):
    plan = derive_plan(load_spec(RECIPES / "gnmt.yaml", PAPER), batch)
    assert plan.peak_lr * 1e3 == pytest.approx(peak_e3, rel=float64_formula(8))
    assert plan.warmup_epochs == warmup  # k·w0 with k a power of two is exact in binary


def test_gnmt_warmup_iterations_constant_at_about_200():
    spec = load_spec(RECIPES / "gnmt.yaml", PAPER)
    iters = {derive_plan(spec, b).warmup_iterations for b, _, _ in GNMT_TABLE}
    assert len(iters) == 1, "LEGW keeps the warmup iterations identical at every batch"
    # bound: the paper's "about 200": the recipe's 0.0145 epochs of 3.5 M pairs at 256 are
    # 198.24 steps at every batch, 0.9% from it
    assert iters.pop() == pytest.approx(200, rel=0.02)


# Table 4 of the paper: ResNet-50, B0 = 1024, η0 = 2^2.5, w0 = 10/2^5 epochs, 90 epochs.
RESNET_TABLE = [
    (1024, 2**2.5, 10 / 2**5),
    (2048, 2**3.0, 10 / 2**4),
    (4096, 2**3.5, 10 / 2**3),
    (8192, 2**4.0, 10 / 2**2),
    (16384, 2**4.5, 10 / 2**1),
    (32768, 2**5.0, 10.0),
]


@pytest.mark.parametrize("batch, peak, warmup", RESNET_TABLE)
def test_resnet50_table_4(batch, peak, warmup):
    plan = derive_plan(load_spec(RECIPES / "resnet50-imagenet.yaml", PAPER), batch)
    assert plan.peak_lr == pytest.approx(peak, rel=float64_formula(8))
    assert plan.warmup_epochs == warmup
    # bound: I0 = ceil(90·n/B0) = 112,603 iterations of 1,281,167 images at 1,024: 90 epochs
    # to within one iteration, 1024/(90·1281167) = 8.9e-6
    assert plan.total_epochs == pytest.approx(90, rel=1e-5)
