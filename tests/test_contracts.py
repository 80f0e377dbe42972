"""The library's contracts: what `DATE`, `LARS`, `LAMB`, `derive_plan`, `load_spec` and
`build_optimizer` accept, and the clear errors for what they cannot do."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from date_engine import DATE, LAMB, LARS, load_spec
from date_engine.data.idx import check_labels
from date_engine.errors import DataError
from date_engine.optim.build import build_optimizer
from date_engine.plan import derive_plan
from date_engine.planning import plan_for
from tests.bounds import close_within
from tests.conftest import RECIPES


def params(*shapes, dtype=torch.float32):
    torch.manual_seed(0)
    out = [torch.nn.Parameter(torch.randn(*s, dtype=dtype)) for s in shapes]
    for p in out:
        p.grad = torch.randn_like(p)
    return out


@pytest.mark.parametrize("option", ["gamma", "trust_coefficient", "lower", "upper"])
@pytest.mark.parametrize("value", [math.nan, math.inf, "8"])
def test_date_refuses_options_that_are_not_finite_numbers(option, value):
    with pytest.raises(ValueError, match=f"{option} must be a finite number"):
        DATE(torch.optim.SGD(params((3, 3)), lr=0.1), **{option: value})


def test_date_refuses_an_unknown_placement():
    with pytest.raises(ValueError, match="placement must be 'gradient' or 'update', got 'bogus'"):
        DATE(torch.optim.SGD(params((3, 3)), lr=0.1), placement="bogus")


def test_date_refuses_lbfgs_and_a_gradient_placement_for_rprop():
    with pytest.raises(ValueError, match="cannot wrap LBFGS"):
        DATE(torch.optim.LBFGS(params((3, 3))), placement="gradient")
    with pytest.raises(ValueError, match="Rprop steps by the sign"):
        DATE(torch.optim.Rprop(params((3, 3))), placement="gradient")
    p = params((3, 3))
    before = p[0].detach().clone()
    opt = DATE(torch.optim.Rprop(p))  # the update placement, from the catalog
    assert opt.placement == "update"
    opt.step()
    assert not torch.equal(p[0], before)


@pytest.mark.parametrize("cls", [LARS, LAMB])
def test_layerwise_optimizers_refuse_sparse_gradients(cls):
    embedding = torch.nn.Embedding(10, 4, sparse=True)
    embedding(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(ValueError, match=f"{cls.__name__} does not support sparse gradients"):
        cls(embedding.parameters(), lr=0.1).step()


def test_lamb_on_complex_parameters_is_lamb_on_their_real_pairs():
    """|g|² (not g²) in the second moment: the complex parameter takes exactly the step its real
    view (real and imaginary parts as two reals) takes."""
    torch.manual_seed(0)
    z = torch.nn.Parameter(torch.randn(4, 3, dtype=torch.complex64))
    r = torch.nn.Parameter(torch.view_as_real(z.detach()).clone())
    grads = [torch.randn(4, 3, dtype=torch.complex64) for _ in range(3)]
    complex_opt, real_opt = LAMB([z], lr=0.01), LAMB([r], lr=0.01)
    for g in grads:
        z.grad, r.grad = g.clone(), torch.view_as_real(g).clone()
        complex_opt.step()
        real_opt.step()
    # float32, 3 steps of LAMB's norms (12 entries each) and update in another order
    torch.testing.assert_close(torch.view_as_real(z.detach()), r.detach(), **close_within(
        torch.float32, (2 * 25 + 22) * 3, r.detach().abs().max().item()))


def test_lamb_refuses_float16_parameters():
    with pytest.raises(ValueError, match="LAMB cannot keep torch.float16 parameters"):
        LAMB(params((3, 3), dtype=torch.float16), lr=0.1).step()


def test_numpy_integers_are_batches():
    spec = load_spec(RECIPES / "lenet-mnist.yaml")
    assert derive_plan(spec, np.int64(2048)) == derive_plan(spec, 2048)
    assert plan_for(spec, np.int64(2048), devices=np.int32(2)).split.micro_batch == 1024


def test_one_override_as_a_string():
    spec = load_spec(RECIPES / "lenet-mnist.yaml", "baseline.lr=0.5")  # not 15 one-letter keys
    assert spec.baseline.lr == 0.5


def test_build_optimizer_from_a_name():
    model = torch.nn.Linear(3, 2)
    opt = build_optimizer(model.named_parameters(), "adam", lr=0.1)
    assert isinstance(opt, DATE) and isinstance(opt.base, torch.optim.Adam)
    assert isinstance(build_optimizer(model.parameters(), "lars", lr=0.1), LARS)
    with pytest.raises(ValueError, match="no optimizer 'adamx'"):
        build_optimizer(model.parameters(), "adamx", lr=0.1)


@pytest.mark.parametrize("labels, words", [
    (torch.tensor([0.0, 1.7]), "labels are stored as torch.float32"),
    (torch.tensor([0, 10]), "labels must lie in 0..9, found 0..10"),
    (torch.tensor([-1, 3]), "found -1..3"),
])
def test_labels_that_are_not_classes(labels, words):
    with pytest.raises(DataError, match=words):
        check_labels(labels, 10, "labels.idx")
    check_labels(torch.tensor([0, 9], dtype=torch.uint8), 10, "ok")
