"""The public API: names re-exported from `date_engine`, torch loaded only when a torch name is
used."""

from __future__ import annotations

import subprocess
import sys

import pytest

import date_engine
from tests.conftest import ROOT


def test_public_names_resolve():
    for name in date_engine.__all__:
        assert getattr(date_engine, name) is not None, name
    from date_engine import DATE, LAMB, LARS, build_optimizer, plan_scheduler  # noqa: F401


def test_import_does_not_load_torch_until_a_torch_name_is_used():
    code = (
        "import sys, date_engine\n"
        "before = 'torch' in sys.modules\n"
        "date_engine.DATE\n"
        "print(before, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.split() == ["False", "True"]


def test_wrong_arguments_to_the_api_get_a_sentence():
    """What an outside check passed to the Python API and got tracebacks deep inside for
    (AttributeError, KeyError 'momentum'): each is refused at the door, saying what to pass."""
    import torch

    from date_engine import DATE, build_optimizer, derive_plan, load_spec, resolve_plan

    with pytest.raises(TypeError, match="derive_plan takes a validated Spec.*got dict"):
        derive_plan({"baseline": {}}, 8)
    with pytest.raises(TypeError, match="resolve_plan takes a validated Spec"):
        resolve_plan({"baseline": {}}, 8)
    with pytest.raises(TypeError, match="load_spec takes the path.*got NoneType"):
        load_spec(None)
    model = torch.nn.Linear(3, 3)
    with pytest.raises(TypeError, match="plan.optimizer.*got NoneType"):
        build_optimizer(model.parameters(), None, 0.1)
    with pytest.raises(ValueError, match="built without names.*named_parameters"):
        DATE(torch.optim.SGD(model.parameters(), lr=0.1), exclude=lambda name, p: "bias" in name)
    DATE(torch.optim.SGD(model.named_parameters(), lr=0.1), exclude=lambda name, p: "b" in name)

    adam = DATE(torch.optim.Adam(model.parameters(), lr=0.1))
    model(torch.ones(1, 3)).sum().backward()
    adam.step()
    sgd = DATE(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    with pytest.raises(ValueError, match="DATE over Adam's; this DATE wraps SGD"):
        sgd.load_state_dict(adam.state_dict())
    plain = adam.base.state_dict()  # a plain base's state dict: no class to compare
    with pytest.raises(ValueError, match="groups lack .*momentum"):
        sgd.load_state_dict(plain)
    sgd.step()  # left as it was: it still steps
    assert sgd.param_groups[0]["momentum"] == 0.9
